#include "runtime/op_origin.h"

#include <ATen/record_function.h>

#include <map>
#include <mutex>
#include <string_view>

namespace devx::op_origin {

namespace {

thread_local int t_depth = 0;
thread_local std::string t_op;
thread_local bool t_backward = false;
thread_local PythonSite t_forward;

// The user's line of each forward op that may make autograd nodes, by (thread, the sequence number
// its first node gets): nodes numbered from there up to the next entry's number were made by it.
// Bounded: past kMaxForward entries the older half is forgotten.
constexpr size_t kMaxForward = 1 << 18;
std::mutex g_forward_mutex;
std::map<std::pair<uint64_t, int64_t>, PythonSite> g_forward;

void note_forward(uint64_t thread, int64_t seq, PythonSite site) {
  std::lock_guard<std::mutex> lock(g_forward_mutex);
  g_forward[{thread, seq}] = site;
  if (g_forward.size() > kMaxForward) {
    auto end = g_forward.begin();
    std::advance(end, g_forward.size() / 2);
    g_forward.erase(g_forward.begin(), end);
  }
}

PythonSite forward_site(uint64_t thread, int64_t seq) {
  std::lock_guard<std::mutex> lock(g_forward_mutex);
  auto it = g_forward.upper_bound({thread, seq});
  if (it == g_forward.begin()) return {};
  --it;
  return it->first.first == thread ? it->second : PythonSite{};
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    // The engine runs a node inside its own record ("autograd::engine::evaluate_function: ..."),
    // which does not say which thread made the node; the node's record does.
    ++t_depth;
    if (!t_backward || t_forward.file == nullptr) {
      t_op = fn.name();
      t_backward = true;
      t_forward = forward_site(fn.forwardThreadId(), fn.seqNr());
    }
    return nullptr;
  }
  if (t_depth++ > 0) return nullptr;
  constexpr std::string_view kEngine = "autograd::engine::evaluate_function: ";
  const std::string_view name = fn.name();
  t_backward = name.substr(0, kEngine.size()) == kEngine;
  t_op = t_backward ? name.substr(kEngine.size()) : name;
  if (!t_backward && fn.seqNr() >= 0) note_forward(fn.threadId(), fn.seqNr(), python_site());
  return nullptr;
}

void on_end(const at::RecordFunction&, at::ObserverContext*) {
  // A record that started before observation began ends without our start: depth stays at 0.
  if (t_depth > 0 && --t_depth == 0) {
    t_op.clear();
    t_backward = false;
    t_forward = {};
  }
}

std::mutex g_mutex;
unsigned g_clients = 0;  // bit per Client
at::CallbackHandle g_callback = at::INVALID_CALLBACK_HANDLE;

}  // namespace

void observe(Client client, bool on) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const unsigned bit = 1u << static_cast<unsigned>(client);
  g_clients = on ? (g_clients | bit) : (g_clients & ~bit);
  if (g_clients != 0 && g_callback == at::INVALID_CALLBACK_HANDLE) {
    g_callback = at::addGlobalCallback(at::RecordFunctionCallback(&on_start, &on_end)
                                           .needsInputs(false)
                                           .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  } else if (g_clients == 0 && g_callback != at::INVALID_CALLBACK_HANDLE) {
    at::removeCallback(g_callback);
    g_callback = at::INVALID_CALLBACK_HANDLE;
  }
}

Current current() {
  return {&t_op, t_backward, t_forward};
}

}  // namespace devx::op_origin
