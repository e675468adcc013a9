// Markers on the memory timeline: while memory history is recorded, the record_function ranges the
// user's code opens (torch.profiler.record_function, optimizer steps, nvtx ranges) are kept as
// begin/end markers with their times, and torch.devx.memory.mark() adds named points, so that a
// timeline says which step or phase each rise and fall of memory belongs to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace devx::history {

struct Marker {
  int64_t time_us;   // the clock of the history's entries: microseconds since the epoch
  std::string kind;  // "begin", "end" or "mark"
  std::string name;
};

// Starts or stops collecting (at most `max_markers`, the oldest dropped); `clear` forgets those kept.
// Collecting installs a RecordFunction callback for user scopes; stopping removes it.
void set_marking(bool on, size_t max_markers, bool clear);
void mark(const std::string& name);
std::vector<Marker> markers();

}  // namespace devx::history
