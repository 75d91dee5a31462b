// kernels/stream_gate.h on the CUDA runtime; cuStreamWaitValue32 through the
// runtime's driver entry point, so nothing links libcuda directly.
#include "kernels/stream_gate.h"

#include "kernels/cuda_memory.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <mutex>
#include <vector>

namespace rcoll::kernels::cuda {
namespace {

using WaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

std::string cuda_words(cudaError_t e) { return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"; }

WaitValue32 wait_value_entry() {
  static WaitValue32 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &p, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<WaitValue32>(nullptr);
    }
    return reinterpret_cast<WaitValue32>(p);
  }();
  return fn;
}

// The process's gate words: pages of pinned, mapped host memory, handed out
// one word at a time and never given back (see the header: a queued wait may
// read a word after its gate is gone). Global by necessity, like the logger.
struct Word {
  volatile uint32_t* host = nullptr;
  uint64_t device = 0;
};

Result<Word> take_word() {
  static std::mutex mu;
  static std::vector<Word> free_words;
  std::lock_guard<std::mutex> lock(mu);
  if (free_words.empty()) {
    constexpr size_t kPage = 4096;
    void* page = nullptr;
    if (cudaError_t e = cudaHostAlloc(&page, kPage, cudaHostAllocMapped | cudaHostAllocPortable); e != cudaSuccess) {
      (void)cudaGetLastError();
      return Status(error_code(static_cast<int>(e)), "cudaHostAlloc of a page for stream gates failed: " + cuda_words(e));
    }
    void* device = nullptr;
    if (cudaError_t e = cudaHostGetDevicePointer(&device, page, 0); e != cudaSuccess) {
      (void)cudaGetLastError();
      (void)cudaFreeHost(page);
      return Status(ErrorCode::kUnsupported, "cudaHostGetDevicePointer for a stream gate failed: " + cuda_words(e));
    }
    for (size_t i = kPage / sizeof(uint32_t); i-- > 0;) {
      free_words.push_back(Word{static_cast<volatile uint32_t*>(page) + i,
                                reinterpret_cast<uint64_t>(device) + i * sizeof(uint32_t)});
    }
  }
  Word w = free_words.back();
  free_words.pop_back();
  return w;
}

}  // namespace

Result<std::unique_ptr<StreamGate>> StreamGate::create(uint32_t opened) {
  if (wait_value_entry() == nullptr) {
    return Status(ErrorCode::kUnsupported, "the CUDA driver has no cuStreamWaitValue32 (stream memory operations)");
  }
  auto word = take_word();
  if (!word.ok()) return word.status();
  *word.value().host = opened;
  std::unique_ptr<StreamGate> gate(new StreamGate(word.value().host, word.value().device));
  // One wait that passes at once, on a stream of its own: a driver or device
  // without stream memory operations says so here, not at the first op.
  cudaStream_t probe = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&probe, cudaStreamNonBlocking); e != cudaSuccess) {
    return Status(error_code(static_cast<int>(e)), "cudaStreamCreateWithFlags for the stream gate's probe failed: " + cuda_words(e));
  }
  Status s = gate->enqueue_wait(probe, opened);
  if (s.ok()) {
    if (cudaError_t e = cudaStreamSynchronize(probe); e != cudaSuccess) {
      s = Status(error_code(static_cast<int>(e)), "the stream gate's probe failed: " + cuda_words(e));
    }
  }
  (void)cudaStreamDestroy(probe);
  if (!s.ok()) return s;
  return gate;
}

// Gates of the process holding a stream now; a hold and a free exclude each
// other (free_if_none_held). Recursive: a free may free more (a communicator
// its pinned memory).
static std::atomic<int> g_held{0};
static std::recursive_mutex g_free_mu;

void StreamGate::open_through(uint64_t seq) {
  // The GPU reads the word over the bus: earlier host writes (none that it
  // reads) need no fence, but the store itself must not linger in a register.
  std::atomic_thread_fence(std::memory_order_release);
  *word_ = static_cast<uint32_t>(seq);
  if (holding_ && seq >= held_seq_) {
    holding_ = false;
    g_held.fetch_sub(1);
  }
}

void StreamGate::hold(uint64_t seq) {
  held_seq_ = seq;
  if (!holding_) {
    std::lock_guard<std::recursive_mutex> lock(g_free_mu);
    holding_ = true;
    g_held.fetch_add(1);
  }
}

bool StreamGate::any_held() { return g_held.load() > 0; }

bool StreamGate::free_if_none_held(const std::function<void()>& free) {
  std::lock_guard<std::recursive_mutex> lock(g_free_mu);
  if (g_held.load() > 0) return false;
  free();
  return true;
}

namespace {

// Frees kept while a gate held a stream.
std::mutex g_kept_mu;
std::vector<std::function<void()>> g_kept;
std::atomic<bool> g_any_kept{false};  // checked at every op's end without the lock

void keep(std::vector<std::function<void()>> frees) {
  std::lock_guard<std::mutex> lock(g_kept_mu);
  for (auto& f : frees) g_kept.push_back(std::move(f));
  g_any_kept = true;
}

}  // namespace

bool StreamGate::free_when_none_held(std::function<void()> free) {
  if (free_if_none_held(free)) return true;
  std::vector<std::function<void()>> one;
  one.push_back(std::move(free));
  keep(std::move(one));
  return false;
}

void StreamGate::free_deferred() {
  if (!g_any_kept.load()) return;
  std::vector<std::function<void()>> frees;
  {
    std::lock_guard<std::mutex> lock(g_kept_mu);
    frees.swap(g_kept);
    g_any_kept = false;
  }
  if (!free_if_none_held([&] {
        for (auto& f : frees) f();
      })) {
    keep(std::move(frees));
  }
}

StreamGate::~StreamGate() {
  if (holding_) g_held.fetch_sub(1);
}

uint32_t StreamGate::opened() const { return *word_; }

Status StreamGate::enqueue_wait(void* stream, uint64_t seq) const {
  const CUresult r = wait_value_entry()(static_cast<CUstream>(stream), static_cast<CUdeviceptr>(device_address_),
                                        static_cast<cuuint32_t>(seq), CU_STREAM_WAIT_VALUE_GEQ);
  if (r == CUDA_SUCCESS) return Status();
  return Status(r == CUDA_ERROR_NOT_SUPPORTED ? ErrorCode::kUnsupported : ErrorCode::kTransport,
                "cuStreamWaitValue32 (a wait at the stream gate for op " + std::to_string(seq) + ") failed: CUresult " +
                    std::to_string(static_cast<int>(r)));
}

}  // namespace rcoll::kernels::cuda
