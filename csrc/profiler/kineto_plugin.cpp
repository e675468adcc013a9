// The devx activity profiler for kineto (PyTorch's PrivateUse1 plugin registry): with
// ProfilerActivity.PrivateUse1 (or CUDA under CUDA mocking), kineto starts a session here, and at
// the end the session hands over the spans of device_activity as kernel / memcpy activities linked
// to the aten ops that launched them. torch.profiler then fills its device-time columns and the
// chrome trace's device rows from them.
#include "profiler/kineto_plugin_config.h"

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
                                            ActivityType::GPU_MEMSET};
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

class DevxProfilerSession final : public libkineto::IActivityProfilerSession {
 public:
  explicit DevxProfilerSession(std::set<ActivityType> types) : types_(std::move(types)) {}

  void start() override {
    start_recording();
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    stop_recording();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked_activity,
                    int64_t /*start_time*/, int64_t /*end_time*/) override {
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
      buffer_.emplace_activity(buffer_.span, kineto_type(a.kind), a.name);
      auto& act = libkineto::CpuTraceBuffer::toRef(buffer_.activities.back());
      act.startTime = a.start_ns;
      act.endTime = a.end_ns;
      act.id = static_cast<int32_t>(a.correlation);
      act.device = a.device;
      act.resource = static_cast<int32_t>(a.stream);
      act.threadId = a.thread;
      if (a.correlation != 0) {
        act.linked = linked_activity(static_cast<int32_t>(a.correlation));
        act.flow.id = static_cast<uint32_t>(a.correlation);
        act.flow.type = libkineto::kLinkAsyncCpuGpu;
        act.flow.start = 0;
      }
      act.addMetadata("device", a.device);
      act.addMetadata("stream", a.stream);
      act.addMetadata("correlation", a.correlation);
      if (a.kind != ActivityKind::kKernel) act.addMetadata("bytes", a.bytes);
      streams_[a.device].insert(a.stream);
      act.log(logger);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    const int64_t device = streams_.empty() ? 0 : streams_.begin()->first;
    return std::make_unique<libkineto::DeviceInfo>(device, device, "devx " + std::to_string(device),
                                                   std::string("devx (") + g_vendor->name + ")");
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
