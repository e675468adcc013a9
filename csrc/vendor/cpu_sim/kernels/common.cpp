#include "kernels/common.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime.h"

namespace devx::cpu_sim::kern {

size_t itemsize(DevxDType dtype) {
  return dispatch(dtype, [](auto tag) { return sizeof(tag); });
}

const char* dtype_name(DevxDType dtype) {
  static const char* const names[] = {"bool",     "uint8",   "int8",    "int16",     "int32",     "int64",
                                      "float16",  "bfloat16", "float32", "float64", "complex64", "complex128"};
  const int i = static_cast<int>(dtype);
  return i >= 0 && i < 12 ? names[i] : "unknown dtype";
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

bool Tensor::contiguous() const {
  int64_t expected = 1;
  for (int d = ndim() - 1; d >= 0; --d) {
    if (sizes[d] == 0) return true;
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

Tensor take(const DevxTensor* d) {
  Tensor t;
  if (!d) {
    // Empty (not 0-dim, which holds one element): code asking numel() of an absent output skips it.
    t.sizes = {0};
    t.strides = {1};
    return t;
  }
  t.data = static_cast<char*>(d->data);
  t.dtype = d->dtype;
  t.sizes.assign(d->sizes, d->sizes + d->ndim);
  t.strides.assign(d->strides, d->strides + d->ndim);
  t.host_scalar = d->device == DEVX_HOST_SCALAR;
  if (t.host_scalar) {
    std::memcpy(t.host_value, d->data, itemsize(d->dtype));
    t.data = t.host_value;
  }
  return t;
}

bool runs_now(DevxKernelContext* ctx) {
  // Synchronous streams run everything now: no stream to find.
  if (!Runtime::get().async()) return true;
  std::shared_ptr<Stream> stream;
  return Runtime::get().find_stream(ctx->stream, &stream) == DEVX_OK && stream->runs_now();
}

DevxStatus run_now(DevxKernelContext* ctx, void (*call)(void*), void* arg) {
  return Stream::run_now(ctx->device, call, arg);
}

DevxStatus submit(DevxKernelContext* ctx, std::function<void()> work) {
  std::shared_ptr<Stream> stream;
  if (DevxStatus status = Runtime::get().find_stream(ctx->stream, &stream)) return status;
  return stream->submit(std::move(work));
}

namespace {

// One deleter type for every queued work, so that shared_ptr's control block is instantiated once.
struct DestroyOwned {
  void (*destroy)(void*);
  void operator()(void* work) const { destroy(work); }
};

}  // namespace

DevxStatus submit_owned(DevxKernelContext* ctx, void* work, void (*run)(void*), void (*destroy)(void*)) {
  std::shared_ptr<void> owned(work, DestroyOwned{destroy});
  return submit(ctx, [owned = std::move(owned), run] { run(owned.get()); });
}

DevxStatus decline(const std::string& why) {
  return fail(DEVX_DECLINED, "cpu_sim kernel: " + why);
}

DevxStatus invalid(const std::string& why) {
  return fail(DEVX_ERROR_INVALID, "cpu_sim kernel: " + why);
}

Dims broadcast_strides(const Tensor& t, const Dims& shape) {
  Dims s(shape.size(), 0);
  const int offset = static_cast<int>(shape.size()) - t.ndim();
  for (int d = 0; d < t.ndim(); ++d) {
    if (t.sizes[d] != 1) s[d + offset] = t.strides[d];
  }
  return s;
}

namespace {

// A job of parallel_for: chunks claimed with an atomic counter by the caller and the workers.
struct Job {
  // The caller's body: it waits in parallel_for_on_pool until every chunk has run.
  RangeBody call = nullptr;
  const void* body = nullptr;
  int64_t n = 0;
  int64_t chunk = 0;
  int64_t chunks = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::condition_variable cv;

  // Runs chunks until none are left; true if it ran the last one.
  void work() {
    for (int64_t c; (c = next.fetch_add(1)) < chunks;) {
      const int64_t begin = c * chunk;
      call(body, begin, std::min(n, begin + chunk));
      if (done.fetch_add(1) + 1 == chunks) {
        std::lock_guard lock(mu);
        cv.notify_all();
      }
    }
  }
};

class Pool {
 public:
  static Pool& get() {
    // Leaked: workers may still run when static destructors do.
    static Pool* pool = new Pool(threads_from_settings());
    return *pool;
  }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void run(const std::shared_ptr<Job>& job) {
    {
      std::lock_guard lock(mu_);
      for (int i = 0; i < std::min<int64_t>(job->chunks - 1, static_cast<int64_t>(workers_.size())); ++i) {
        queue_.push_back(job);
      }
    }
    cv_.notify_all();
    job->work();
    std::unique_lock lock(job->mu);
    job->cv.wait(lock, [&] { return job->done.load() == job->chunks; });
  }

 private:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) {
      workers_.emplace_back([this] { loop(); });
      workers_.back().detach();
    }
  }

  static int threads_from_settings() {
    const int n = Runtime::get().settings().threads;
    return n > 0 ? n : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }

  void loop() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !queue_.empty(); });
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job->work();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
};

}  // namespace

int num_threads() {
  return Pool::get().size();
}

void parallel_for_on_pool(int64_t n, int64_t grain, RangeBody call, const void* body) {
  const int threads = num_threads();
  auto job = std::make_shared<Job>();
  job->call = call;
  job->body = body;
  job->n = n;
  job->chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
  job->chunk = (n + job->chunks - 1) / job->chunks;
  job->chunks = (n + job->chunk - 1) / job->chunk;
  Pool::get().run(job);
}

}  // namespace devx::cpu_sim::kern
