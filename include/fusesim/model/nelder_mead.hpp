#pragma once
// Nelder-Mead on an unconstrained vector, shared by the fits of the kernel models
// (kernel_fit.hpp) and of the ring protocols (calibration_fit.hpp). The fits search their
// parameters as logs or logits, so every point tried is a valid model. Deterministic: fixed start,
// fixed steps, fixed iteration cap.
#include <functional>
#include <vector>

namespace fusesim::model {

std::vector<double> nelder_mead(const std::function<double(const std::vector<double>&)>& f, std::vector<double> x0,
                                const std::vector<double>& steps, int iterations);

}  // namespace fusesim::model
