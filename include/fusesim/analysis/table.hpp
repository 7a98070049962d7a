#pragma once
// Plain-text tables with aligned columns, for human-readable reports.
#include <string>
#include <vector>

namespace fusesim::analysis {

enum class Align { left, right };

struct Column {
  std::string header;  // with its unit: "step (ms)"
  Align align = Align::right;
};

class Table {
 public:
  explicit Table(std::vector<Column> columns);
  // Throws std::invalid_argument when the row has the wrong number of cells.
  void add_row(std::vector<std::string> cells);
  // Header, a rule, the rows; columns separated by two spaces, no trailing blanks, ends with '\n'.
  std::string render() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace fusesim::analysis
