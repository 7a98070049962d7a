#pragma once
// Plain-text tables with aligned columns, for human-readable reports.
#include <cstddef>
#include <string>
#include <vector>

namespace fusesim::analysis {

enum class Align { left, right };

struct Column {
  std::string header;  // with its unit: "step (ms)"
  Align align = Align::right;
  // Above 0: a cell longer than this many characters is broken at spaces onto continuation lines of
  // its row (the other columns blank there), so that prose (a topology's description) keeps the
  // table readable in a terminal. A word longer than the width stays whole.
  std::size_t wrap = 0;
};

class Table {
 public:
  explicit Table(std::vector<Column> columns);
  // Throws std::invalid_argument when the row has the wrong number of cells.
  void add_row(std::vector<std::string> cells);
  // Header, a rule, the rows; columns separated by two spaces, no trailing blanks, ends with '\n'.
  // Widths count bytes: cells are expected in ASCII.
  std::string render() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace fusesim::analysis
