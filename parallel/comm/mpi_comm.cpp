#include "parallel/comm/mpi_comm.h"

#include <algorithm>
#include <climits>

#include "kernels/device_memory.h"
#include "kernels/ops.h"
#include "parallel/comm/watchdog.h"

#ifdef RINGTRAIN_HAVE_CUDA
#include "parallel/comm/cuda/pinned_host.h"
#endif

namespace rt {

namespace {

#define RT_MPI_CHECK(call)                                                                        \
  do {                                                                                            \
    int rt_mpi_rc_ = (call);                                                                      \
    if (rt_mpi_rc_ != MPI_SUCCESS) {                                                              \
      char rt_mpi_msg_[MPI_MAX_ERROR_STRING];                                                     \
      int rt_mpi_len_ = 0;                                                                        \
      MPI_Error_string(rt_mpi_rc_, rt_mpi_msg_, &rt_mpi_len_);                                    \
      RT_CHECK(false, #call << " failed: " << std::string(rt_mpi_msg_, size_t(rt_mpi_len_)));     \
    }                                                                                             \
  } while (0)

// Point-to-point messages are cut into pieces of at most 1 GiB, so byte counts always fit MPI's int.
constexpr size_t kMaxMessageBytes = size_t(1) << 30;
// Collectives on f32 are cut into pieces of at most this many elements.
constexpr int64_t kMaxCollectiveElems = int64_t(1) << 28;

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

}  // namespace

// ---- HostStaging ----------------------------------------------------------------------------------

HostStaging::~HostStaging() {
  for (Buffer& b : pool_) deallocate(b.data);
}

// Only CUDA tensors are staged (a CPU tensor is its own host copy), so with CUDA built in the buffers are
// pinned: allocated once per buffer at first use (the pool then reuses them), freed with the comm.
#ifdef RINGTRAIN_HAVE_CUDA
void* HostStaging::allocate(size_t bytes) { return pinned_host_alloc(bytes); }
void HostStaging::deallocate(void* data) { pinned_host_free(data); }
#else
void* HostStaging::allocate(size_t bytes) { return device_alloc(Device::cpu(), bytes); }
void HostStaging::deallocate(void* data) { device_free(Device::cpu(), data); }
#endif

Tensor HostStaging::acquire(const Tensor& t, bool copy_in) {
  if (t.device.is_cpu()) return t;
  const size_t bytes = std::max<size_t>(t.nbytes(), 1);
  Buffer* found = nullptr;
  for (Buffer& b : pool_) {
    if (!b.busy && b.bytes >= bytes && (!found || b.bytes < found->bytes)) found = &b;
  }
  if (!found) {
    pool_.push_back({allocate(bytes), bytes, false});
    found = &pool_.back();
  }
  found->busy = true;
  Tensor host = t;  // same dtype and shape, on the host
  host.data = found->data;
  host.device = Device::cpu();
  if (copy_in) copy_cast(host, t);
  return host;
}

void HostStaging::release(const Tensor& t, const Tensor& host, bool copy_out) {
  if (t.device.is_cpu()) return;
  if (copy_out) copy_cast(t, host);
  for (Buffer& b : pool_) {
    if (b.data == host.data) b.busy = false;
  }
}

// ---- MpiComm --------------------------------------------------------------------------------------

MpiComm::MpiComm(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  RT_CHECK(initialized, "MpiComm: MPI is not initialised; call MPI_Init before creating communicators");
  RT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  RT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

MpiComm::~MpiComm() {
  // Exchanges still pending mean we are unwinding from an error: waiting could hang on a peer that never
  // sends, so leave them (and the communicator) to MPI_Abort / process exit.
  if (mpi_finalized() || !pending_.empty()) return;
  if (owned_ && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiComm::all_reduce_sum(Tensor t) {
  RT_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16,
           "MpiComm::all_reduce_sum: only f32 and bf16 tensors are supported, got " << dtype_name(t.dtype) << " "
                                                                                 << t.shape_str());
  if (size_ == 1) return;
  Tensor host = staging_.acquire(t, /*copy_in=*/true);
  float* p = nullptr;
  if (t.dtype == DType::f32) {
    p = host.ptr<float>();
  } else {
    // bf16 (GPU activations under tp): summed in f32 on the host and rounded once, so every rank gets the
    // same, correctly rounded sum (NCCL sums bf16 in bf16 hop by hop; this is at least as accurate).
    widened_.resize(size_t(host.numel()));  // (numel) f32, grows once to the largest tensor
    const uint16_t* h = host.ptr<uint16_t>();
    for (int64_t i = 0; i < host.numel(); ++i) widened_[size_t(i)] = bf16_to_float(h[i]);
    p = widened_.data();
  }
  for (int64_t done = 0, n = host.numel(); done < n;) {
    const int64_t count = std::min(n - done, kMaxCollectiveElems);
    MPI_Request r;
    RT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, p + done, int(count), MPI_FLOAT, MPI_SUM, comm_, &r));
    watchdog_wait(&r, 1, comm_, "all_reduce (tensor)");
    done += count;
  }
  if (t.dtype == DType::bf16) {
    uint16_t* h = host.ptr<uint16_t>();
    for (int64_t i = 0; i < host.numel(); ++i) h[i] = float_to_bf16(widened_[size_t(i)]);
  }
  staging_.release(t, host, /*copy_out=*/true);
}

void MpiComm::all_reduce_sum(double* values, int count) {
  if (size_ == 1 || count == 0) return;
  MPI_Request r;
  RT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, comm_, &r));
  watchdog_wait(&r, 1, comm_, "all_reduce (scalars)");
}

void MpiComm::broadcast(Tensor t, int root) {
  RT_CHECK(0 <= root && root < size_, "MpiComm::broadcast: root " << root << " out of range [0, " << size_ << ")");
  if (size_ == 1) return;
  Tensor host = staging_.acquire(t, /*copy_in=*/rank_ == root);
  char* p = static_cast<char*>(host.data);
  for (size_t done = 0, n = host.nbytes(); done < n;) {
    const size_t count = std::min(n - done, kMaxMessageBytes);
    MPI_Request r;
    RT_MPI_CHECK(MPI_Ibcast(p + done, int(count), MPI_BYTE, root, comm_, &r));
    watchdog_wait(&r, 1, comm_, "broadcast");
    done += count;
  }
  staging_.release(t, host, /*copy_out=*/rank_ != root);
}

void MpiComm::barrier() {
  MPI_Request r;
  RT_MPI_CHECK(MPI_Ibarrier(comm_, &r));
  watchdog_wait(&r, 1, comm_, "barrier");
}

ExchangeHandle MpiComm::ring_exchange_start(const Tensor& send, Tensor recv) {
  RT_CHECK(send.nbytes() == recv.nbytes(), "ring exchange: send " << send.shape_str() << " " << dtype_name(send.dtype)
                                                                 << " and recv " << recv.shape_str() << " "
                                                                 << dtype_name(recv.dtype)
                                                                 << " must have the same byte size");
  const int id = next_id_++;
  Pending& p = pending_[id];
  p.send = send;
  p.recv = recv;
  if (size_ == 1) {  // a ring of one sends to itself
    if (send.data != recv.data) copy_cast(recv, send);
    return {id};
  }
  p.send_host = staging_.acquire(send, /*copy_in=*/true);
  p.recv_host = staging_.acquire(recv, /*copy_in=*/false);
  // Every rank posts the same sequence of exchanges on a communicator, so the exchange id is a tag that
  // keeps several outstanding exchanges (e.g. K/V and dK/dV with cp = 2, where next == prev) apart.
  const int tag = id % 32000;
  const int next = (rank_ + 1) % size_, prev = (rank_ - 1 + size_) % size_;
  const char* sp = static_cast<const char*>(p.send_host.data);
  char* rp = static_cast<char*>(p.recv_host.data);
  for (size_t done = 0, n = send.nbytes(); done < n;) {  // receives first, then sends, all non-blocking
    const size_t count = std::min(n - done, kMaxMessageBytes);
    p.requests.emplace_back();
    RT_MPI_CHECK(MPI_Irecv(rp + done, int(count), MPI_BYTE, prev, tag, comm_, &p.requests.back()));
    done += count;
  }
  for (size_t done = 0, n = send.nbytes(); done < n;) {
    const size_t count = std::min(n - done, kMaxMessageBytes);
    p.requests.emplace_back();
    RT_MPI_CHECK(MPI_Isend(sp + done, int(count), MPI_BYTE, next, tag, comm_, &p.requests.back()));
    done += count;
  }
  return {id};
}

ExchangeHandle MpiComm::peer_exchange_start(const std::vector<PeerTransfer>& sends,
                                            const std::vector<PeerTransfer>& recvs) {
  check_peer_exchange(sends, recvs, size_, "MpiComm");
  const int id = next_id_++;
  Pending& p = pending_[id];
  const int tag = id % 32000;  // as ring_exchange_start: every rank posts the same sequence of exchanges
  for (const PeerTransfer& t : recvs) {  // receives first, then sends, all non-blocking
    p.peer_recvs.emplace_back(t.buf, staging_.acquire(t.buf, /*copy_in=*/false));
    char* rp = static_cast<char*>(p.peer_recvs.back().second.data);
    for (size_t done = 0, n = t.buf.nbytes(); done < n;) {
      const size_t count = std::min(n - done, kMaxMessageBytes);
      p.requests.emplace_back();
      RT_MPI_CHECK(MPI_Irecv(rp + done, int(count), MPI_BYTE, t.peer, tag, comm_, &p.requests.back()));
      done += count;
    }
  }
  for (const PeerTransfer& t : sends) {
    p.peer_sends.emplace_back(t.buf, staging_.acquire(t.buf, /*copy_in=*/true));
    const char* sp = static_cast<const char*>(p.peer_sends.back().second.data);
    for (size_t done = 0, n = t.buf.nbytes(); done < n;) {
      const size_t count = std::min(n - done, kMaxMessageBytes);
      p.requests.emplace_back();
      RT_MPI_CHECK(MPI_Isend(sp + done, int(count), MPI_BYTE, t.peer, tag, comm_, &p.requests.back()));
      done += count;
    }
  }
  return {id};
}

void MpiComm::wait(ExchangeHandle handle) {
  auto it = pending_.find(handle.id);
  RT_CHECK(it != pending_.end(), "MpiComm::wait: exchange " << handle.id << " was never started or already waited");
  Pending& p = it->second;
  if (!p.requests.empty()) {
    watchdog_wait(p.requests.data(), int(p.requests.size()), comm_, "ring exchange");
    if (p.send_host.data) staging_.release(p.send, p.send_host, /*copy_out=*/false);
    if (p.recv_host.data) staging_.release(p.recv, p.recv_host, /*copy_out=*/true);
  }
  for (const auto& t : p.peer_sends) staging_.release(t.first, t.second, /*copy_out=*/false);
  for (const auto& t : p.peer_recvs) staging_.release(t.first, t.second, /*copy_out=*/true);
  pending_.erase(it);
}

ExchangeHandle MpiComm::reduce_scatter_sum_start(const Tensor& send, Tensor recv) {
  check_reduce_scatter(send, recv, size_, "MpiComm");
  RT_CHECK(send.dtype == DType::f32, "MpiComm::reduce_scatter_sum: only f32 is supported (gradients), got "
                                         << dtype_name(send.dtype));
  RT_CHECK(recv.numel() < (int64_t(1) << 31), "MpiComm::reduce_scatter_sum: " << recv.numel()
                                                  << " elements per rank exceed MPI's int count; use more ranks");
  const int id = next_id_++;
  Pending& p = pending_[id];
  p.send = send;
  p.recv = recv;
  if (size_ == 1) {
    copy_cast(recv, send);
    return {id};
  }
  p.send_host = staging_.acquire(send, /*copy_in=*/true);
  p.recv_host = staging_.acquire(recv, /*copy_in=*/false);
  p.requests.emplace_back();
  RT_MPI_CHECK(MPI_Ireduce_scatter_block(p.send_host.data, p.recv_host.data, int(recv.numel()), MPI_FLOAT, MPI_SUM,
                                         comm_, &p.requests.back()));
  return {id};
}

ExchangeHandle MpiComm::all_gather_start(const Tensor& send, Tensor recv) {
  check_all_gather(send, recv, size_, "MpiComm");
  RT_CHECK(send.nbytes() < (size_t(1) << 31), "MpiComm::all_gather: " << send.nbytes()
                                                  << " bytes per rank exceed MPI's int count; use more ranks");
  const int id = next_id_++;
  Pending& p = pending_[id];
  p.send = send;
  p.recv = recv;
  if (size_ == 1) {
    if (send.data != recv.data) copy_cast(recv, send);
    return {id};
  }
  // In place (send is recv's own block): MPI_IN_PLACE, and only recv is staged (its block r copied in).
  const size_t block = send.nbytes();
  const bool in_place = static_cast<const char*>(send.data) == static_cast<const char*>(recv.data) + block * rank_;
  p.recv_host = staging_.acquire(recv, /*copy_in=*/in_place);
  const void* src = MPI_IN_PLACE;
  if (!in_place) {
    p.send_host = staging_.acquire(send, /*copy_in=*/true);
    src = p.send_host.data;
  }
  p.requests.emplace_back();
  RT_MPI_CHECK(MPI_Iallgather(src, in_place ? 0 : int(block), MPI_BYTE, p.recv_host.data, int(block), MPI_BYTE,
                              comm_, &p.requests.back()));
  return {id};
}

ExchangeHandle MpiComm::all_to_all_start(const Tensor& send, Tensor recv) {
  check_all_to_all(send, recv, size_, "MpiComm");
  const size_t chunk = send.nbytes() / size_t(size_);
  RT_CHECK(chunk < (size_t(1) << 31), "MpiComm::all_to_all: " << chunk
                                          << " bytes per chunk exceed MPI's int count; use more ranks");
  const int id = next_id_++;
  Pending& p = pending_[id];
  p.send = send;
  p.recv = recv;
  if (size_ == 1) {
    copy_cast(recv, send);
    return {id};
  }
  p.send_host = staging_.acquire(send, /*copy_in=*/true);
  p.recv_host = staging_.acquire(recv, /*copy_in=*/false);
  p.requests.emplace_back();
  RT_MPI_CHECK(MPI_Ialltoall(p.send_host.data, int(chunk), MPI_BYTE, p.recv_host.data, int(chunk), MPI_BYTE, comm_,
                             &p.requests.back()));
  return {id};
}

std::shared_ptr<Comm> MpiComm::split(int color, int key) {
  RT_CHECK(color >= 0, "MpiComm::split: color " << color << " must be non-negative");
  MPI_Comm sub = MPI_COMM_NULL;
  RT_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
  return std::make_shared<MpiComm>(sub, /*owned=*/true);
}

std::shared_ptr<Comm> make_mpi_world_comm() { return std::make_shared<MpiComm>(MPI_COMM_WORLD, /*owned=*/false); }

}  // namespace rt
