#include <stdexcept>
#include <string>

#include "api.h"
#include "error.h"
#include "runtime.h"

namespace devx::cpu_sim {
namespace {

// CUDA's numbers, so code that derives "high priority" from the range behaves the same. The
// priority itself changes nothing: each async stream has its own thread, scheduled by the OS,
// and no entry of the table reads a stream's priority back.
constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -2;

}  // namespace

DevxStatus stream_priority_range(int* least, int* greatest) {
  if (least == nullptr || greatest == nullptr) {
    return fail(DEVX_ERROR_INVALID, "cpu_sim stream_priority_range: NULL output");
  }
  *least = kLeastPriority;
  *greatest = kGreatestPriority;
  return DEVX_OK;
}

// Any priority is accepted, as cudaStreamCreateWithPriority clamps rather than rejects.
DevxStatus stream_create(int device, int /*priority*/, DevxStreamHandle* stream) {
  if (stream == nullptr) return fail(DEVX_ERROR_INVALID, "cpu_sim stream_create: NULL output");
  if (DevxStatus status = Runtime::get().check_device(device)) return status;
  *stream = reinterpret_cast<DevxStreamHandle>(Runtime::get().new_stream(device).get());
  return DEVX_OK;
}

DevxStatus stream_destroy(DevxStreamHandle stream) {
  if (stream == nullptr) {
    return fail(DEVX_ERROR_INVALID,
                "cpu_sim stream_destroy: the default stream cannot be destroyed");
  }
  // Unregistered first, so that of two threads destroying one stream only one gets to.
  const std::shared_ptr<Stream> target = Runtime::get().streams().remove(stream);
  if (target == nullptr) return unknown_handle("stream", stream);
  // Work already submitted still runs, as in CUDA; here destroy waits for it rather than
  // finishing it in the background.
  const DevxStatus status = target->synchronize();
  target->stop_worker();
  target->join_worker();
  return status;
}

DevxStatus stream_synchronize(DevxStreamHandle stream) {
  std::shared_ptr<Stream> target;
  if (DevxStatus status = Runtime::get().find_stream(stream, &target)) return status;
  return target->synchronize();
}

DevxStatus stream_query(DevxStreamHandle stream) {
  std::shared_ptr<Stream> target;
  if (DevxStatus status = Runtime::get().find_stream(stream, &target)) return status;
  return target->idle() ? DEVX_OK : DEVX_ERROR_NOT_READY;
}

DevxStatus stream_wait_event(DevxStreamHandle stream, DevxEventHandle event) {
  std::shared_ptr<Stream> target;
  std::shared_ptr<Event> marker;
  if (DevxStatus status = Runtime::get().find_stream(stream, &target)) return status;
  if (DevxStatus status = Runtime::get().find_event(event, &marker)) return status;
  // Bound now to the current recording. Never recorded, or already reached: nothing to wait
  // for (an unrecorded event counts as complete, as in CUDA).
  // Work after the wait depends on the work before the event: if that failed, so does the wait,
  // and the waiting stream's next synchronisation reports it.
  auto inherit = [device = marker->device()](const std::string& error) {
    if (!error.empty()) {
      throw std::runtime_error("it waited for an event of device " + std::to_string(device) +
                               " recorded after work that failed: " + error);
    }
  };
  const Event::Snapshot now = marker->snapshot();
  if (now.reached >= now.recorded) {
    if (now.error.empty()) return DEVX_OK;
    return target->submit([inherit, error = now.error] { inherit(error); });
  }
  // A raw stream pointer is safe: the work runs on that stream, which its worker keeps alive.
  return target->submit([stream = target.get(), marker, recording = now.recorded, inherit] {
    stream->wait_event(*marker, recording);
    inherit(marker->snapshot().error);
  });
}

DevxStatus launch_host_func(DevxStreamHandle stream, DevxHostFn fn, void* user_data) {
  if (fn == nullptr) return fail(DEVX_ERROR_INVALID, "cpu_sim launch_host_func: NULL function");
  std::shared_ptr<Stream> target;
  if (DevxStatus status = Runtime::get().find_stream(stream, &target)) return status;
  return target->submit([fn, user_data] { fn(user_data); });
}

}  // namespace devx::cpu_sim
