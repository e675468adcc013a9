#include <chrono>
#include <string>

#include "api.h"
#include "error.h"
#include "runtime.h"

namespace devx::cpu_sim {
namespace {

// The host never gives up waiting for an event.
const std::atomic<bool> kNeverAbandon{false};

// Why an event cannot be timed, or DEVX_OK. `which` is "start" or "end".
DevxStatus check_timed(const char* which, const Event& event, const Event::Snapshot& state) {
  const std::string prefix = std::string("cpu_sim event_elapsed_ms: the ") + which + " event ";
  if (!event.timing()) {
    return fail(DEVX_ERROR_INVALID, prefix + "was created without timing (enable_timing=0)");
  }
  if (state.recorded == 0) return fail(DEVX_ERROR_INVALID, prefix + "has not been recorded");
  if (state.reached < state.recorded) {
    return fail(DEVX_ERROR_NOT_READY, prefix + "has not completed yet");
  }
  return DEVX_OK;
}

}  // namespace

DevxStatus event_create(int device, int enable_timing, DevxEventHandle* event) {
  if (event == nullptr) return fail(DEVX_ERROR_INVALID, "cpu_sim event_create: NULL output");
  if (DevxStatus status = Runtime::get().check_device(device)) return status;
  auto created = std::make_shared<Event>(device, enable_timing != 0);
  *event = reinterpret_cast<DevxEventHandle>(created.get());
  Runtime::get().events().add(std::move(created));
  return DEVX_OK;
}

DevxStatus event_destroy(DevxEventHandle event) {
  // Work still queued holds its own reference, so a pending recording or wait stays valid.
  if (Runtime::get().events().remove(event) != nullptr) return DEVX_OK;
  return unknown_handle("event", event);
}

DevxStatus event_record(DevxEventHandle event, DevxStreamHandle stream) {
  std::shared_ptr<Event> marker;
  std::shared_ptr<Stream> target;
  if (DevxStatus status = Runtime::get().find_event(event, &marker)) return status;
  if (DevxStatus status = Runtime::get().find_stream(stream, &target)) return status;
  if (marker->device() != target->device()) {
    return fail(DEVX_ERROR_INVALID, "cpu_sim event_record: an event of device " +
                                        std::to_string(marker->device()) +
                                        " cannot be recorded on a stream of device " +
                                        std::to_string(target->device()));
  }
  // A raw stream pointer is safe: the work runs on that stream, which its worker keeps alive.
  return target->submit([marker, recording = marker->begin_recording(), stream = target.get()] {
    marker->reach(recording, stream->pending_error());
  });
}

DevxStatus event_synchronize(DevxEventHandle event) {
  std::shared_ptr<Event> marker;
  if (DevxStatus status = Runtime::get().find_event(event, &marker)) return status;
  marker->wait(marker->snapshot().recorded, kNeverAbandon);
  const Event::Snapshot state = marker->snapshot();
  if (!state.error.empty()) {
    return fail(DEVX_ERROR, "cpu_sim event_synchronize: work before the event on device " +
                                std::to_string(marker->device()) + " failed: " + state.error);
  }
  return DEVX_OK;
}

DevxStatus event_query(DevxEventHandle event) {
  std::shared_ptr<Event> marker;
  if (DevxStatus status = Runtime::get().find_event(event, &marker)) return status;
  const Event::Snapshot state = marker->snapshot();
  return state.reached >= state.recorded ? DEVX_OK : DEVX_ERROR_NOT_READY;
}

DevxStatus event_elapsed_ms(DevxEventHandle start, DevxEventHandle end, float* ms) {
  if (ms == nullptr) return fail(DEVX_ERROR_INVALID, "cpu_sim event_elapsed_ms: NULL output");
  std::shared_ptr<Event> first;
  std::shared_ptr<Event> last;
  if (DevxStatus status = Runtime::get().find_event(start, &first)) return status;
  if (DevxStatus status = Runtime::get().find_event(end, &last)) return status;
  if (first->device() != last->device()) {
    // As CUDA: the two clocks are not comparable.
    return fail(DEVX_ERROR_INVALID, "cpu_sim event_elapsed_ms: the start event is on device " +
                                        std::to_string(first->device()) + " and the end event on device " +
                                        std::to_string(last->device()) + "; both must be on the same device");
  }
  const Event::Snapshot first_state = first->snapshot();
  const Event::Snapshot last_state = last->snapshot();
  if (DevxStatus status = check_timed("start", *first, first_state)) return status;
  if (DevxStatus status = check_timed("end", *last, last_state)) return status;
  *ms = std::chrono::duration<float, std::milli>(last_state.stamp - first_state.stamp).count();
  return DEVX_OK;
}

}  // namespace devx::cpu_sim
