#include "runtime/stream_hold.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "runtime/exception.h"
#include "runtime/vendor.h"

namespace devx {

namespace {

struct Gate {
  std::mutex mutex;
  std::condition_variable opened;
  bool open = false;
};

std::mutex g_mutex;
std::unordered_map<int64_t, std::shared_ptr<Gate>> g_gates;
int64_t g_next_token = 1;

}  // namespace

int64_t hold_stream(const DevxStream& stream) {
  TORCH_CHECK(g_async_host_streams, "devx: holding a stream needs a vendor whose streams run on threads of their "
              "own (DEVX_SIM_ASYNC=1 on cpu_sim); vendor '", vendor().name, "' would block the caller instead");
  auto gate = std::make_shared<Gate>();
  int64_t token = 0;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    token = g_next_token++;
    g_gates.emplace(token, gate);
  }
  launch_host_work(stream, [gate] {
    std::unique_lock<std::mutex> lock(gate->mutex);
    gate->opened.wait(lock, [&] { return gate->open; });
  });
  return token;
}

void release_stream(int64_t token) {
  std::shared_ptr<Gate> gate;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_gates.find(token);
    TORCH_CHECK(it != g_gates.end(), "devx: no held stream has token ", token, " (already released?)");
    gate = std::move(it->second);
    g_gates.erase(it);
  }
  {
    std::lock_guard<std::mutex> lock(gate->mutex);
    gate->open = true;
  }
  gate->opened.notify_all();
}

}  // namespace devx
