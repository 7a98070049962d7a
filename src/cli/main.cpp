// The only place where exceptions become exit statuses: 0 ok, 2 bad input, 1 internal error.
#include <exception>
#include <iostream>
#include <new>

#include "fusesim/cli/app.hpp"
#include "fusesim/util/error.hpp"
#include "fusesim/util/output.hpp"

int main(int argc, char** argv) {
  fusesim::cli::Io io{std::cout, std::cerr};
  // A report being written when the user presses Ctrl-C leaves no temporary file behind.
  fusesim::remove_temporary_files_on_interrupt();
  try {
    return fusesim::cli::run(argc, argv, io);
  } catch (const fusesim::InputError& e) {
    std::cerr << fusesim::cli::format_input_error(e.file(), e.json_path(), e.message()) << '\n';
    return 2;
  } catch (const fusesim::GraphError& e) {
    // A generator built a graph that cannot run: a bug in fusesim, not in the user's files.
    std::cerr << "internal error: invalid task graph: " << fusesim::cli::one_line(e.what()) << '\n';
    return 1;
  } catch (const std::bad_alloc&) {
    // The readers refuse what they can estimate to be too large (topology ranks, generated graphs);
    // whatever still does not fit is said so, not as "std::bad_alloc".
    std::cerr << "error: out of memory: what these inputs ask to build does not fit in this machine's memory; "
                 "simulate a smaller scope (--scope layer), fewer ranks or fewer micro-batches\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << fusesim::cli::one_line(e.what()) << '\n';
    return 1;
  } catch (...) {
    std::cerr << "internal error: unknown exception\n";
    return 1;
  }
}
