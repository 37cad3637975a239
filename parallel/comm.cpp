#include "parallel/comm.h"

#include "kernels/ops.h"

namespace rt {

ExchangeHandle LocalComm::ring_exchange_start(const Tensor& send, Tensor recv) {
  // A ring of one sends to itself.
  if (send.data != recv.data) copy_cast(recv, send);
  return {0};
}

}  // namespace rt
