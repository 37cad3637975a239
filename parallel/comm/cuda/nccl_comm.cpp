// NcclComm (see nccl_comm.h): bootstrap over MPI, collectives on the compute stream, the ring exchange on a
// comm stream ordered by events.
#include "parallel/comm/cuda/nccl_comm.h"

#include <cstring>
#include <exception>
#include <unordered_map>

#include "kernels/cuda_api.h"
#include "parallel/comm/cuda/nccl_check.h"
#include "parallel/comm/cuda/nccl_watchdog.h"

namespace rt {

namespace {

#define RT_NCCL_MPI_CHECK(call)                                            \
  do {                                                                     \
    const int rt_rc_ = (call);                                             \
    RT_CHECK(rt_rc_ == MPI_SUCCESS, #call << " failed with MPI error " << rt_rc_); \
  } while (0)

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

ncclDataType_t nccl_float_type(DType dtype, const char* op) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    default: break;
  }
  RT_CHECK(false, "NcclComm::" << op << ": only f32 and bf16 tensors can be summed, got " << dtype_name(dtype));
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

}  // namespace

// Posted ring exchanges: the event the compute stream waits for, and that stream.
struct NcclComm::Exchanges {
  struct Posted {
    cudaEvent_t done;
    cudaStream_t compute;
  };
  cudaEvent_t ready = nullptr;  // recorded on the compute stream when an exchange is posted
  std::vector<cudaEvent_t> free;
  std::unordered_map<int, Posted> posted;
  int next_id = 0;
};

NcclComm::NcclComm(MPI_Comm mpi_comm, int device, NcclOptions options)
    : device_(device), options_(options), exchanges_(std::make_unique<Exchanges>()) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  RT_CHECK(initialized, "NcclComm: MPI is not initialised; NCCL is bootstrapped over MPI (call MPI_Init first)");
  if (options_.timeout_s <= 0) options_.timeout_s = default_nccl_timeout_s();
  RT_NCCL_MPI_CHECK(MPI_Comm_dup(mpi_comm, &mpi_));
  RT_NCCL_MPI_CHECK(MPI_Comm_rank(mpi_, &rank_));
  RT_NCCL_MPI_CHECK(MPI_Comm_size(mpi_, &size_));
  cuda::init(device_);  // selects the GPU for this thread (and creates its cuBLASLt handle once)

  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  RT_NCCL_MPI_CHECK(MPI_Bcast(&id, int(sizeof(id)), MPI_BYTE, 0, mpi_));
  NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));

  cudaStream_t s = nullptr;
  // Non-blocking: the legacy default stream (the compute stream by default) must not serialise with it.
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  comm_stream_ = s;
  CUDA_CHECK(cudaEventCreateWithFlags(&exchanges_->ready, cudaEventDisableTiming));
  watchdog_ = std::make_unique<NcclWatchdog>(comm_, device_, options_.timeout_s, world_rank(),
                                             "nccl comm of " + std::to_string(size_) + " ranks");
}

NcclComm::~NcclComm() {
  try {
    cudaSetDevice(device_);
    // Everything in flight completes first (the watchdog still ends the process if a peer never answers),
    // so destroying the communicator cannot block on a dead peer.
    if (watchdog_) watchdog_->drain();
    watchdog_.reset();
    if (comm_) ncclCommDestroy(comm_);
    for (auto& [id, p] : exchanges_->posted) cudaEventDestroy(p.done);
    for (cudaEvent_t e : exchanges_->free) cudaEventDestroy(e);
    if (exchanges_->ready) cudaEventDestroy(exchanges_->ready);
    if (comm_stream_) cudaStreamDestroy(as_stream(comm_stream_));
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && mpi_ != MPI_COMM_NULL) MPI_Comm_free(&mpi_);
  } catch (...) {
    // teardown: nothing sensible left to do
  }
}

void NcclComm::check_tensor(const Tensor& t, const char* op) const {
  RT_CHECK(t.device.is_cuda() && t.device.index == device_,
           "NcclComm::" << op << ": tensor " << t.shape_str() << " is on " << t.device.str() << " but this comm is on cuda:"
                        << device_ << "; NCCL moves GPU tensors of its own device only (use parallel.comm: mpi for "
                                      "CPU tensors)");
}

void NcclComm::check_async(const char* op) {
  ncclResult_t async = ncclSuccess;
  NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
  RT_CHECK(async == ncclSuccess || async == ncclInProgress,
           "NcclComm::" << op << ": asynchronous NCCL error " << ncclGetErrorString(async) << nccl_last_error_suffix()
                        << "; a peer rank probably failed");
}

void NcclComm::all_reduce_sum(Tensor t) {
  check_tensor(t, "all_reduce_sum");
  const ncclDataType_t type = nccl_float_type(t.dtype, "all_reduce_sum");
  if (t.numel() == 0) return;
  cudaStream_t stream = cuda::stream_for(t, "NcclComm::all_reduce_sum");
  NCCL_CHECK(ncclAllReduce(t.data, t.data, size_t(t.numel()), type, ncclSum, comm_, stream));
  watchdog_->watch(stream, "all_reduce");
  check_async("all_reduce_sum");
}

void NcclComm::all_reduce_sum(double* values, int count) {
  // Host scalars (loss sums, token counts, stop flags): over the MPI communicator the comm was built from.
  if (size_ == 1 || count == 0) return;
  RT_NCCL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, mpi_));
}

void NcclComm::broadcast(Tensor t, int root) {
  RT_CHECK(0 <= root && root < size_, "NcclComm::broadcast: root " << root << " out of range [0, " << size_ << ")");
  check_tensor(t, "broadcast");
  if (t.nbytes() == 0) return;
  cudaStream_t stream = cuda::stream_for(t, "NcclComm::broadcast");
  NCCL_CHECK(ncclBroadcast(t.data, t.data, t.nbytes(), ncclUint8, root, comm_, stream));
  watchdog_->watch(stream, "broadcast");
  check_async("broadcast");
}

void NcclComm::barrier() { RT_NCCL_MPI_CHECK(MPI_Barrier(mpi_)); }

ExchangeHandle NcclComm::ring_exchange_start(const Tensor& send, Tensor recv) {
  RT_CHECK(send.nbytes() == recv.nbytes(), "ring exchange: send " << send.shape_str() << " " << dtype_name(send.dtype)
                                                                 << " and recv " << recv.shape_str() << " "
                                                                 << dtype_name(recv.dtype)
                                                                 << " must have the same byte size");
  check_tensor(send, "ring_exchange_start");
  check_tensor(recv, "ring_exchange_start");
  cudaStream_t compute = cuda::stream_for(send, "NcclComm::ring_exchange_start");
  // The hop may start once everything launched so far on the compute stream is done: that covers the
  // writes to `send` and the last reads of `recv` (the buffer being replaced).
  cudaStream_t comm = as_stream(enter_comm_stream(compute));
  const int next = (rank_ + 1) % size_, prev = (rank_ - 1 + size_) % size_;
  NCCL_CHECK(ncclGroupStart());
  NCCL_CHECK(ncclSend(send.data, send.nbytes(), ncclUint8, next, comm_, comm));
  NCCL_CHECK(ncclRecv(recv.data, recv.nbytes(), ncclUint8, prev, comm_, comm));
  NCCL_CHECK(ncclGroupEnd());
  return post(compute, "ring exchange (send to next + recv from previous)");
}

ExchangeHandle NcclComm::peer_exchange_start(const std::vector<PeerTransfer>& sends,
                                             const std::vector<PeerTransfer>& recvs) {
  check_peer_exchange(sends, recvs, size_, "NcclComm");
  const Tensor* any = !sends.empty() ? &sends[0].buf : !recvs.empty() ? &recvs[0].buf : nullptr;
  cudaStream_t compute = any ? cuda::stream_for(*any, "NcclComm::peer_exchange_start") : cuda::current_stream();
  cudaStream_t comm = as_stream(enter_comm_stream(compute));
  if (any) {
    NCCL_CHECK(ncclGroupStart());
    for (const PeerTransfer& t : sends) {
      check_tensor(t.buf, "peer_exchange_start");
      NCCL_CHECK(ncclSend(t.buf.data, t.buf.nbytes(), ncclUint8, t.peer, comm_, comm));
    }
    for (const PeerTransfer& t : recvs) {
      check_tensor(t.buf, "peer_exchange_start");
      NCCL_CHECK(ncclRecv(t.buf.data, t.buf.nbytes(), ncclUint8, t.peer, comm_, comm));
    }
    NCCL_CHECK(ncclGroupEnd());
  }
  return post(compute, "peer exchange (the ring's needed hops)");
}

void* NcclComm::enter_comm_stream(void* compute_stream) {
  cudaStream_t compute = as_stream(compute_stream), comm = as_stream(comm_stream_);
  // The collective may start once everything launched so far on the compute stream is done: that covers the
  // writes to its send buffer and the last reads of the buffer it overwrites.
  CUDA_CHECK(cudaEventRecord(exchanges_->ready, compute));
  CUDA_CHECK(cudaStreamWaitEvent(comm, exchanges_->ready, 0));
  return comm;
}

ExchangeHandle NcclComm::post(void* compute_stream, const char* what) {
  Exchanges& x = *exchanges_;
  cudaStream_t comm = as_stream(comm_stream_);
  cudaEvent_t done = nullptr;
  if (!x.free.empty()) {
    done = x.free.back();
    x.free.pop_back();
  } else {
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  }
  CUDA_CHECK(cudaEventRecord(done, comm));
  watchdog_->watch(comm, what);
  check_async(what);
  const int id = x.next_id++;
  x.posted[id] = {done, as_stream(compute_stream)};
  return {id};
}

ExchangeHandle NcclComm::reduce_scatter_sum_start(const Tensor& send, Tensor recv) {
  check_reduce_scatter(send, recv, size_, "NcclComm");
  check_tensor(send, "reduce_scatter_sum_start");
  check_tensor(recv, "reduce_scatter_sum_start");
  const ncclDataType_t type = nccl_float_type(send.dtype, "reduce_scatter_sum_start");
  cudaStream_t compute = cuda::stream_for(send, "NcclComm::reduce_scatter_sum_start");
  cudaStream_t comm = as_stream(enter_comm_stream(compute));
  NCCL_CHECK(ncclReduceScatter(send.data, recv.data, size_t(recv.numel()), type, ncclSum, comm_, comm));
  return post(compute, "reduce_scatter");
}

ExchangeHandle NcclComm::all_gather_start(const Tensor& send, Tensor recv) {
  check_all_gather(send, recv, size_, "NcclComm");
  check_tensor(send, "all_gather_start");
  check_tensor(recv, "all_gather_start");
  cudaStream_t compute = cuda::stream_for(send, "NcclComm::all_gather_start");
  cudaStream_t comm = as_stream(enter_comm_stream(compute));
  NCCL_CHECK(ncclAllGather(send.data, recv.data, send.nbytes(), ncclUint8, comm_, comm));
  return post(compute, "all_gather");
}

ExchangeHandle NcclComm::all_to_all_start(const Tensor& send, Tensor recv) {
  check_all_to_all(send, recv, size_, "NcclComm");
  check_tensor(send, "all_to_all_start");
  check_tensor(recv, "all_to_all_start");
  cudaStream_t compute = cuda::stream_for(send, "NcclComm::all_to_all_start");
  cudaStream_t comm = as_stream(enter_comm_stream(compute));
  const size_t chunk = send.nbytes() / size_t(size_);
  const char* sp = static_cast<const char*>(send.data);
  char* rp = static_cast<char*>(recv.data);
  CUDA_CHECK(cudaMemcpyAsync(rp + chunk * size_t(rank_), sp + chunk * size_t(rank_), chunk, cudaMemcpyDeviceToDevice,
                             comm));
  NCCL_CHECK(ncclGroupStart());
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    NCCL_CHECK(ncclSend(sp + chunk * size_t(peer), chunk, ncclUint8, peer, comm_, comm));
    NCCL_CHECK(ncclRecv(rp + chunk * size_t(peer), chunk, ncclUint8, peer, comm_, comm));
  }
  NCCL_CHECK(ncclGroupEnd());
  return post(compute, "all_to_all (grouped send / recv with every peer)");
}

void NcclComm::wait(ExchangeHandle handle) {
  Exchanges& x = *exchanges_;
  auto it = x.posted.find(handle.id);
  RT_CHECK(it != x.posted.end(), "NcclComm::wait: exchange " << handle.id << " was never started or already waited");
  // The compute stream (not the host) waits for the hop: kernels launched after this see the data.
  CUDA_CHECK(cudaStreamWaitEvent(it->second.compute, it->second.done, 0));
  x.free.push_back(it->second.done);
  x.posted.erase(it);
}

std::shared_ptr<Comm> NcclComm::split(int color, int key) {
  RT_CHECK(color >= 0, "NcclComm::split: color " << color << " must be non-negative");
  MPI_Comm sub = MPI_COMM_NULL;
  RT_NCCL_MPI_CHECK(MPI_Comm_split(mpi_, color, key, &sub));
  auto out = std::make_shared<NcclComm>(sub, device_, options_);  // a fresh unique id over `sub`
  MPI_Comm_free(&sub);                                             // NcclComm keeps its own duplicate
  return out;
}

}  // namespace rt
