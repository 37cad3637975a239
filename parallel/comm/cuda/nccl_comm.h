// NcclComm: the Comm of GPU ranks (DESIGN.md "Core types"), bootstrapped over MPI.
//
//   bootstrap   rank 0 of the MPI communicator calls ncclGetUniqueId, MPI_Bcast hands it to everybody,
//               then ncclCommInitRank. The GPU comes from the local rank (MPI_Comm_split_type SHARED).
//   split()     MPI_Comm_split, then a fresh unique id over the sub-communicator (one NCCL comm per group).
//   collectives all_reduce_sum (f32, bf16) and broadcast run on the caller's compute stream
//               (rt::cuda::current_stream()), so they are ordered with the ops around them and the host
//               does not wait. Host scalars are summed over the MPI communicator kept beside the NCCL one.
//   ring        ring_exchange_start: an event on the compute stream -> the comm stream waits for it -> one
//               ncclGroupStart/End of send (to next) + recv (from prev) -> a "done" event. wait() makes the
//               compute stream wait for that event: the host never blocks, compute waits only for the hop
//               it needs, and the hop overlaps whatever compute was launched between start and wait.
//               peer_exchange_start is the same with any peers: one group of ncclSend / ncclRecv.
//   zero        reduce_scatter_sum_start / all_gather_start go on the same comm stream as the ring, ordered by the
//               same events: posted after everything launched so far on the compute stream, and wait() makes
//               the compute stream (never the host) wait for the result.
//   failures    every NCCL call is checked (file:line). A watchdog thread polls ncclCommGetAsyncError and
//               the completion events of every enqueued NCCL operation; an async error, or an operation not
//               done after the timeout (a dead or stuck peer), prints "ringtrain: error on rank R: ...",
//               aborts the NCCL comm and exits the process with status 1, so mpirun ends the job instead of
//               hanging. Timeout: NcclOptions::timeout_s, default from RINGTRAIN_NCCL_TIMEOUT_S (600 s).
//
// NCCL refuses two ranks on one GPU ("Duplicate GPU detected"): check ranks_share_gpu() first and use
// MpiComm (pinned host staging) in that case.
#pragma once
#include <mpi.h>
#include <nccl.h>

#include <memory>
#include <string>

#include "parallel/comm/comm.h"

namespace rt {

struct NcclOptions {
  double timeout_s = 0;  // <= 0: RINGTRAIN_NCCL_TIMEOUT_S, else 600 s
};

// The GPU of this process: local rank (within the node, MPI_COMM_TYPE_SHARED) modulo the visible devices.
// Collective over `world`.
int local_rank_gpu(MPI_Comm world);
// Whether any two ranks of `world` on the same node would use the same physical GPU (compared by UUID,
// so CUDA_VISIBLE_DEVICES per rank is handled). Collective over `world`.
bool ranks_share_gpu(MPI_Comm world, int device);

class NcclWatchdog;

class NcclComm final : public Comm {
 public:
  // Collective over `mpi_comm` (duplicated; the caller keeps its own). `device` is this rank's GPU.
  NcclComm(MPI_Comm mpi_comm, int device, NcclOptions options = {});
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  void all_reduce_sum(Tensor t) override;  // f32 or bf16, on this comm's GPU, in place
  void all_reduce_sum(double* values, int count) override;
  void broadcast(Tensor t, int root) override;  // any dtype
  void barrier() override;
  ExchangeHandle ring_exchange_start(const Tensor& send, Tensor recv) override;
  void wait(ExchangeHandle handle) override;
  ExchangeHandle peer_exchange_start(const std::vector<PeerTransfer>& sends,
                                     const std::vector<PeerTransfer>& recvs) override;
  ExchangeHandle reduce_scatter_sum_start(const Tensor& send, Tensor recv) override;  // f32 or bf16
  ExchangeHandle all_gather_start(const Tensor& send, Tensor recv) override;          // any dtype
  // Grouped ncclSend / ncclRecv to and from every peer on the comm stream (the own chunk copied there too).
  ExchangeHandle all_to_all_start(const Tensor& send, Tensor recv) override;         // any dtype
  std::shared_ptr<Comm> split(int color, int key) override;

  int device() const { return device_; }
  ncclComm_t handle() const { return comm_; }

 private:
  void check_tensor(const Tensor& t, const char* op) const;
  void check_async(const char* op);
  // The comm stream after waiting for `compute`'s work so far; post() records the done event and a handle.
  void* enter_comm_stream(void* compute);
  ExchangeHandle post(void* compute, const char* what);

  MPI_Comm mpi_ = MPI_COMM_NULL;
  int device_ = 0;
  int rank_ = 0, size_ = 1;
  NcclOptions options_;
  ncclComm_t comm_ = nullptr;
  void* comm_stream_ = nullptr;  // cudaStream_t (non-blocking), kept opaque to keep this header light
  std::unique_ptr<NcclWatchdog> watchdog_;
  struct Exchanges;
  std::unique_ptr<Exchanges> exchanges_;
};

// The MPI world as an NcclComm on this rank's GPU (local_rank_gpu). Refuses, with the fix, when ranks share
// a GPU. Collective over MPI_COMM_WORLD.
std::shared_ptr<Comm> make_nccl_world_comm(NcclOptions options = {});

}  // namespace rt
