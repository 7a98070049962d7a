#pragma once
// A double as C's printf("%a") and fmt's "{:a}" write it ("0x1.8p+1"): every bit of the value, so
// that a digest over such text changes exactly when a value does. Appended without formatting: a
// profile's fit digest writes tens of thousands of them at every start-up.
#include <string>

namespace fusesim {

void append_hex_float(std::string& out, double value);

}  // namespace fusesim
