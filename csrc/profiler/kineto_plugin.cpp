// The devx activity profiler for kineto (PyTorch's PrivateUse1 plugin registry): with
// ProfilerActivity.PrivateUse1 (or CUDA under CUDA mocking), kineto starts a session here, and at
// the end the session hands over the spans of device_activity as kernel / memcpy activities linked
// to the aten ops that launched them, each with a host-side launch activity (devxLaunchKernel, as
// cudaLaunchKernel on CUDA) that starts the flow the device activity ends, so trace viewers draw
// an arrow from the launch to the work. torch.profiler then fills its device-time columns and the
// chrome trace's device rows from them.
#include "profiler/kineto_plugin_config.h"

#include "profiler/device_activity.h"

namespace devx::profiler {
bool kineto_plugin_available() {
  return DEVX_HAS_KINETO_PLUGIN;
}
}  // namespace devx::profiler

#if DEVX_HAS_KINETO_PLUGIN

#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <map>
#include <set>

#include "profiler/device_activity.h"
#include "runtime/device.h"
#include "runtime/vendor.h"

namespace devx::profiler {
namespace {

using libkineto::ActivityType;

const std::set<ActivityType>& device_activity_types() {
  static const std::set<ActivityType> types{ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY,
                                            ActivityType::GPU_MEMSET, ActivityType::PRIVATEUSE1_RUNTIME};
  return types;
}

ActivityType kineto_type(ActivityKind kind) {
  switch (kind) {
    case ActivityKind::kMemcpy:
      return ActivityType::GPU_MEMCPY;
    case ActivityKind::kMemset:
      return ActivityType::GPU_MEMSET;
    default:
      return ActivityType::CONCURRENT_KERNEL;
  }
}

// The host call that launched the work, named as CUDA's runtime calls are.
const char* launch_name(ActivityKind kind) {
  switch (kind) {
    case ActivityKind::kMemcpy:
      return "devxMemcpyAsync";
    case ActivityKind::kMemset:
      return "devxMemsetAsync";
    default:
      return "devxLaunchKernel";
  }
}

class DevxProfilerSession final : public libkineto::IActivityProfilerSession {
 public:
  explicit DevxProfilerSession(std::set<ActivityType> types) : types_(std::move(types)) {}

  // A session without devx activities (a CPU-only profile) records no spans, so the op path's
  // diagnostics gate stays closed, but still hides the simulator's own ops from the CPU rows.
  void start() override {
    set_session_active(true);
    if (records_device_work()) start_recording();
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    if (records_device_work()) stop_recording();
    set_session_active(false);
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked_activity,
                    int64_t start_time, int64_t /*end_time*/) override {
    std::vector<Activity> activities;
    try {
      activities = collect();
    } catch (const std::exception& e) {
      errors_.push_back(std::string("devx: reading device activity timings failed: ") + e.what());
      status_ = libkineto::TraceStatus::ERROR;
      return;
    }
    for (const auto& a : activities) {
      if (!types_.count(kineto_type(a.kind))) continue;
      const libkineto::ITraceActivity* op = a.correlation != 0 ? linked_activity(static_cast<int32_t>(a.correlation))
                                                               : nullptr;
      if (types_.count(ActivityType::PRIVATEUSE1_RUNTIME)) log_launch(logger, a, op);
      auto& act = add(kineto_type(a.kind), a.name, a, op);
      act.startTime = a.start_ns;
      act.endTime = a.end_ns;
      act.device = a.device;
      act.resource = static_cast<int32_t>(a.stream);
      act.addMetadata("stream", a.stream);
      if (a.kind != ActivityKind::kKernel) act.addMetadata("bytes", a.bytes);
      streams_[a.device].insert(a.stream);
      act.log(logger);
    }
    // One named process per device with activity. Kineto asks getDeviceInfo() for one device only
    // (and names processes 0..15 after the host process when it gets none): the others go here.
    for (auto it = streams_.begin(); it != streams_.end(); ++it) {
      if (it != streams_.begin()) logger.handleDeviceInfo(device_info(it->first), start_time);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(device_info(streams_.empty() ? 0 : streams_.begin()->first));
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    for (const auto& [device, streams] : streams_) {
      for (auto stream : streams) {
        out.push_back({stream, stream, device, stream == 0 ? "default stream" : "stream " + std::to_string(stream)});
      }
    }
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::make_unique<libkineto::CpuTraceBuffer>(std::move(buffer_));
  }

  void pushCorrelationId(uint64_t id) override { push_correlation(id); }
  void popCorrelationId() override { pop_correlation(); }

 private:
  // Sorted after the host's processes, as kineto sorts GPUs.
  static libkineto::DeviceInfo device_info(int64_t device) {
    return {device, libkineto::kExceedMaxPid + device, "devx " + std::to_string(device),
            std::string("devx (") + g_vendor->name + ")"};
  }

  bool records_device_work() const {
    return types_.count(ActivityType::CONCURRENT_KERNEL) || types_.count(ActivityType::GPU_MEMCPY) ||
           types_.count(ActivityType::GPU_MEMSET);
  }

  // An activity of `a`'s launch or of its work, linked to the op that launched it (the trace's
  // External id), with the launch's id as its correlation and flow id; the launch starts the flow.
  libkineto::GenericTraceActivity& add(ActivityType type, const std::string& name, const Activity& a,
                                       const libkineto::ITraceActivity* op) {
    buffer_.emplace_activity(buffer_.span, type, name);
    auto& act = libkineto::CpuTraceBuffer::toRef(buffer_.activities.back());
    act.id = static_cast<int32_t>(a.id);
    act.threadId = a.thread;
    act.linked = op;
    act.flow.id = a.id;
    act.flow.type = libkineto::kLinkAsyncCpuGpu;
    act.flow.start = type == ActivityType::PRIVATEUSE1_RUNTIME;
    act.addMetadata("device", a.device);
    act.addMetadata("correlation", a.id);
    return act;
  }

  // On the launching thread's row, as torch's own CPU ops are (process id, system thread id).
  void log_launch(libkineto::ActivityLogger& logger, const Activity& a, const libkineto::ITraceActivity* op) {
    auto& act = add(ActivityType::PRIVATEUSE1_RUNTIME, launch_name(a.kind), a, op);
    act.startTime = a.launch_start_ns;
    act.endTime = a.launch_end_ns;
    act.device = libkineto::processId();
    act.resource = a.thread;
    act.log(logger);
  }

  std::set<ActivityType> types_;
  std::vector<std::string> errors_;
  libkineto::CpuTraceBuffer buffer_;
  std::map<int64_t, std::set<int64_t>> streams_;
};

class DevxActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<ActivityType>& availableActivities() const override { return device_activity_types(); }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& activity_types,
                                                                 const libkineto::Config&) override {
    std::set<ActivityType> wanted;
    for (auto t : activity_types) {
      if (device_activity_types().count(t)) wanted.insert(t);
    }
    return std::make_unique<DevxProfilerSession>(std::move(wanted));
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                 const std::set<ActivityType>& activity_types,
                                                                 const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_{"devx"};
};

REGISTER_PRIVATEUSE1_PROFILER(DevxActivityProfiler);

}  // namespace
}  // namespace devx::profiler

#endif  // DEVX_HAS_KINETO_PLUGIN
