#include "fusesim/analysis/table.hpp"

#include <algorithm>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

namespace fusesim::analysis {

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

void Table::add_row(std::vector<std::string> cells) {
  if (cells.size() != columns_.size())
    throw std::invalid_argument(fmt::format("table row has {} cells for {} columns", cells.size(), columns_.size()));
  rows_.push_back(std::move(cells));
}

namespace {

// `text` broken at spaces into lines of at most `width` characters (a longer word alone on its line).
std::vector<std::string> wrap_words(const std::string& text, std::size_t width) {
  std::vector<std::string> lines;
  std::string line;
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t start = text.find_first_not_of(' ', i);
    if (start == std::string::npos) break;
    std::size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string_view word(text.data() + start, end - start);
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(std::move(line));
      line.clear();
    }
    if (!line.empty()) line += ' ';
    line += word;
    i = end;
  }
  lines.push_back(std::move(line));
  return lines;
}

}  // namespace

std::string Table::render() const {
  // Each row as one or more lines of cells: a wrapped column's long cell spreads over several.
  std::vector<std::vector<std::string>> lines;
  for (const auto& row : rows_) {
    std::vector<std::vector<std::string>> parts(columns_.size());
    std::size_t height = 1;
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      if (columns_[c].wrap > 0 && row[c].size() > columns_[c].wrap)
        parts[c] = wrap_words(row[c], columns_[c].wrap);
      else
        parts[c] = {row[c]};
      height = std::max(height, parts[c].size());
    }
    for (std::size_t k = 0; k < height; ++k) {
      std::vector<std::string> cells(columns_.size());
      for (std::size_t c = 0; c < columns_.size(); ++c)
        if (k < parts[c].size()) cells[c] = parts[c][k];
      lines.push_back(std::move(cells));
    }
  }
  std::vector<std::size_t> width(columns_.size());
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    width[c] = columns_[c].header.size();
    for (const auto& cells : lines) width[c] = std::max(width[c], cells[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      if (c) out += "  ";
      if (columns_[c].align == Align::left)
        out += fmt::format("{:<{}}", cells[c], width[c]);
      else
        out += fmt::format("{:>{}}", cells[c], width[c]);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::vector<std::string> headers;
  std::vector<std::string> rule;
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    headers.push_back(columns_[c].header);
    rule.emplace_back(width[c], '-');
  }
  std::string out = line(headers) + line(rule);
  for (const auto& cells : lines) out += line(cells);
  return out;
}

}  // namespace fusesim::analysis
