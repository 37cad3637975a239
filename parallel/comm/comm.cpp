#include "parallel/comm/comm.h"

#include "kernels/ops.h"

namespace rt {

std::shared_ptr<Comm> Comm::split(int, int) {
  RT_CHECK(false, "the " << name() << " communicator cannot be split into process-grid groups; build the grid "
                         "from an MPI world communicator (make_mpi_world_comm)");
}

ExchangeHandle Comm::peer_exchange_start(const std::vector<PeerTransfer>&, const std::vector<PeerTransfer>&) {
  RT_CHECK(false, "the " << name() << " communicator has no point-to-point exchange; run the ring on an MPI or NCCL "
                         "communicator");
}

ExchangeHandle Comm::all_to_all_start(const Tensor&, Tensor) {
  RT_CHECK(false, "the " << name() << " communicator has no all-to-all (parallel.cp_a2a > 1 needs the mpi or nccl "
                         "communicator)");
}

void check_all_to_all(const Tensor& send, const Tensor& recv, int size, const char* comm) {
  RT_CHECK(send.dtype == recv.dtype && send.numel() == recv.numel() && send.numel() % size == 0,
           comm << "::all_to_all: send " << send.shape_str() << " " << dtype_name(send.dtype) << " and recv "
                << recv.shape_str() << " " << dtype_name(recv.dtype) << " must be " << size
                << " equal chunks of one dtype");
  const char* s0 = static_cast<const char*>(send.data);
  const char* r0 = static_cast<const char*>(recv.data);
  RT_CHECK(send.numel() == 0 || r0 + recv.nbytes() <= s0 || s0 + send.nbytes() <= r0,
           comm << "::all_to_all: send and recv overlap; give recv its own buffer");
}

ExchangeHandle LocalComm::all_to_all_start(const Tensor& send, Tensor recv) {
  check_all_to_all(send, recv, 1, "LocalComm");
  copy_cast(recv, send);
  return {0};
}

ExchangeHandle LocalComm::ring_exchange_start(const Tensor& send, Tensor recv) {
  // A ring of one sends to itself.
  if (send.data != recv.data) copy_cast(recv, send);
  return {0};
}

void check_peer_exchange(const std::vector<PeerTransfer>& sends, const std::vector<PeerTransfer>& recvs, int size,
                         const char* comm) {
  for (const auto* list : {&sends, &recvs})
    for (size_t i = 0; i < list->size(); ++i) {
      const PeerTransfer& t = (*list)[i];
      RT_CHECK(0 <= t.peer && t.peer < size, comm << "::peer_exchange_start: peer " << t.peer
                                                  << " is not a rank of this communicator of " << size);
      RT_CHECK(t.buf.defined(), comm << "::peer_exchange_start: the buffer for peer " << t.peer << " is undefined");
      for (size_t j = 0; j < i; ++j)
        RT_CHECK((*list)[j].peer != t.peer, comm << "::peer_exchange_start: two " << (list == &sends ? "sends to" : "receives from")
                                                 << " rank " << t.peer << " in one group; post them in two groups");
    }
}

ExchangeHandle LocalComm::peer_exchange_start(const std::vector<PeerTransfer>& sends,
                                              const std::vector<PeerTransfer>& recvs) {
  check_peer_exchange(sends, recvs, 1, "LocalComm");
  RT_CHECK(sends.size() == recvs.size(), "LocalComm::peer_exchange_start: a send to itself needs a receive from itself");
  if (!sends.empty() && sends[0].buf.data != recvs[0].buf.data) copy_cast(recvs[0].buf, sends[0].buf);
  return {0};
}

void check_reduce_scatter(const Tensor& send, const Tensor& recv, int size, const char* comm) {
  RT_CHECK(send.dtype == recv.dtype && send.numel() == recv.numel() * size,
           comm << "::reduce_scatter_sum: send " << send.shape_str() << " " << dtype_name(send.dtype) << " must hold "
                << size << " x recv " << recv.shape_str() << " " << dtype_name(recv.dtype) << " of the same dtype");
  RT_CHECK(send.dtype == DType::f32 || send.dtype == DType::bf16,
           comm << "::reduce_scatter_sum: only f32 and bf16 tensors can be summed, got " << dtype_name(send.dtype));
  const char* s0 = static_cast<const char*>(send.data);
  const char* r0 = static_cast<const char*>(recv.data);
  RT_CHECK(send.numel() == 0 || r0 + recv.nbytes() <= s0 || s0 + send.nbytes() <= r0,
           comm << "::reduce_scatter_sum: send and recv overlap; give recv its own buffer");
}

void check_all_gather(const Tensor& send, const Tensor& recv, int size, const char* comm) {
  RT_CHECK(send.dtype == recv.dtype && send.numel() * size == recv.numel(),
           comm << "::all_gather: recv " << recv.shape_str() << " " << dtype_name(recv.dtype) << " must hold " << size
                << " x send " << send.shape_str() << " " << dtype_name(send.dtype) << " of the same dtype");
}

ExchangeHandle LocalComm::reduce_scatter_sum_start(const Tensor& send, Tensor recv) {
  check_reduce_scatter(send, recv, 1, "LocalComm");
  copy_cast(recv, send);
  return {0};
}

ExchangeHandle LocalComm::all_gather_start(const Tensor& send, Tensor recv) {
  check_all_gather(send, recv, 1, "LocalComm");
  if (send.data != recv.data) copy_cast(recv, send);
  return {0};
}

}  // namespace rt
