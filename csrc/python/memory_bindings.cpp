// Bindings of the memory history: snapshots as the dicts of torch.cuda.memory._snapshot(), the
// timeline as rows.
#include "python/memory_bindings.h"

#include <pybind11/stl.h>

#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/settings.h"
#include "runtime/memory_history.h"
#include "runtime/memory_markers.h"
#include "runtime/sync_debug.h"

namespace py = pybind11;

namespace devx {

namespace {

py::list frames_list(const history::StackPtr& stack) {
  py::list out;
  if (!stack) return out;
  for (const PythonFrame& f : history::frames(*stack)) {
    py::dict d;
    d["filename"] = f.filename;
    d["line"] = f.line;
    d["name"] = f.name;
    out.append(std::move(d));
  }
  return out;
}

py::dict segment_dict(const SegmentView& seg) {
  size_t allocated = 0, requested = 0;
  py::list blocks;
  for (const BlockView& b : seg.blocks) {
    py::dict d;
    d["address"] = reinterpret_cast<uintptr_t>(b.ptr);
    d["size"] = b.size;
    d["requested_size"] = b.requested;
    d["state"] = b.allocated ? "active_allocated" : "inactive";
    d["frames"] = b.allocated ? frames_list(history::block_stack(b.ptr)) : py::list();
    blocks.append(std::move(d));
    if (b.allocated) {
      allocated += b.size;
      requested += b.requested;
    }
  }
  py::dict d;
  d["device"] = static_cast<int>(seg.device);
  d["address"] = reinterpret_cast<uintptr_t>(seg.ptr);
  d["total_size"] = seg.size;
  d["allocated_size"] = allocated;
  // Frees complete at once (no stream defers them), so what is active is what is allocated.
  d["active_size"] = allocated;
  d["requested_size"] = requested;
  d["stream"] = 0;
  d["segment_type"] = seg.small ? "small" : "large";
  d["segment_pool_id"] = py::make_tuple(0, 0);
  d["is_expandable"] = false;
  d["frames"] = frames_list(history::segment_stack(seg.ptr));
  d["blocks"] = std::move(blocks);
  return d;
}

py::dict trace_entry_dict(const history::Entry& e) {
  py::dict d;
  d["action"] = history::action_name(e.action);
  if (e.action != history::Action::kOom) d["addr"] = e.addr;
  d["size"] = e.size;
  d["stream"] = 0;
  d["time_us"] = e.time_us;
  d["frames"] = frames_list(e.stack);
  if (e.action == history::Action::kOom) d["device_free"] = e.device_free;
  return d;
}

py::dict snapshot() {
  std::vector<SegmentView> segments = allocator_segments();
  py::list segs;
  for (const SegmentView& seg : segments) segs.append(segment_dict(seg));
  py::list traces;
  for (int d = 0; d < device_count(); ++d) {
    py::list trace;
    for (const history::Entry& e : history::entries(d)) trace.append(trace_entry_dict(e));
    traces.append(std::move(trace));
  }
  py::dict settings;
  settings["PYTORCH_CUDA_ALLOC_CONF"] = devx::settings::get_text(devx::settings::Id::DEVX_ALLOC_CONF);
  settings["expandable_segments"] = false;
  py::dict out;
  out["segments"] = std::move(segs);
  out["device_traces"] = std::move(traces);
  out["allocator_settings"] = std::move(settings);
  out["external_annotations"] = py::list();
  return out;
}

// (time_us, action, address, size, allocated, peak allocated, reserved, largest free block)
using TimelineRow = std::tuple<int64_t, std::string, uintptr_t, size_t, int64_t, int64_t, int64_t, int64_t>;

std::vector<TimelineRow> timeline(int64_t device) {
  std::vector<TimelineRow> rows;
  for (const history::Entry& e : history::entries(device_index_arg(device))) {
    rows.emplace_back(e.time_us, history::action_name(e.action), e.addr, e.size, e.totals.allocated,
                      e.totals.peak_allocated, e.totals.reserved, e.totals.largest_free);
  }
  return rows;
}

void record_history(bool enabled, bool trace, const std::string& context, bool cpp_frames, size_t max_entries,
                    bool clear) {
  if (!enabled) {
    history::configure(nullptr, clear);
    history::set_marking(false, 0, clear);
    return;
  }
  history::Settings s;
  s.trace = trace;
  s.context = context == "all"     ? history::Context::kAll
              : context == "alloc" ? history::Context::kAlloc
              : context == "state" ? history::Context::kState
                                   : history::Context::kNone;
  s.cpp_frames = cpp_frames;
  s.max_entries = max_entries;
  history::configure(&s, clear);
  history::set_marking(s.trace, max_entries, clear);
}

}  // namespace

void bind_memory(py::module_& m) {
  m.def("_record_memory_history", &record_history, py::arg("enabled"), py::arg("trace"), py::arg("context"),
        py::arg("cpp_frames"), py::arg("max_entries"), py::arg("clear"));
  m.def("_memory_snapshot", &snapshot);
  m.def("_memory_timeline", &timeline);
  m.def("_memory_history_recording", &history::recording);
  m.def("_memory_mark", &history::mark);
  m.def("_memory_markers", [] {
    std::vector<std::tuple<int64_t, std::string, std::string>> rows;
    for (const history::Marker& m : history::markers()) rows.emplace_back(m.time_us, m.kind, m.name);
    return rows;
  });
  // Giving memory back waits for the device, whose queued work may need the GIL (a held stream is
  // released from Python).
  m.def("_empty_cache", [] {
    py::gil_scoped_release no_gil;
    devx_allocator()->emptyCache();
  });
  m.def("_set_memory_fraction", &set_memory_fraction);
  m.def("_set_sync_debug_mode", &sync_debug::set_mode);
  m.def("_sync_debug_mode", &sync_debug::mode);
  m.def("_memory_fraction", &memory_fraction);
}

}  // namespace devx
