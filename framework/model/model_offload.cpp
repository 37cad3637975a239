// Activation offload (train.offload: activations): the block inputs of layers [0, offload_layers) go to pinned
// host memory as each layer's forward ends and come back one layer ahead in the backward, on a copy stream
// (kernels/host_copy.h) ordered by events, so that the copies run under the layers' compute.
//
//   device   residual_[l] for l < offload_layers is offload_stage_[l % 2]: layer l reads stage l % 2 and writes
//            its output into stage (l + 1) % 2, which held layer l - 1's input: before that write, the compute
//            stream waits for layer l - 1's copy out (posted when l - 1's forward ended: a layer's attention
//            of overlap).
//   backward at the start of layer l + 1's backward, layer l's input is posted back into stage l % 2 (its last
//            reader, layer l + 2, is done); layer l waits for it before its recompute. The last two offloaded
//            inputs are still on the device after the forward and are not copied back.
#include "framework/model/model_internal.h"

namespace rt {

void Model::init_offload() {
  offload_ = std::make_unique<Offload>(residual_[0].device);
  offload_->out_ticket.assign(size_t(offload_layers_), -1);
  offload_->in_ticket.assign(size_t(offload_layers_), -1);
  const size_t bytes = residual_[0].nbytes();
  for (int l = 0; l < offload_layers_; ++l) host_inputs_.push_back(AsyncHostCopier::alloc_pinned(bytes));
}

Model::~Model() {
  for (void* p : host_inputs_) AsyncHostCopier::free_pinned(p);
}

void Model::offload_begin_step(bool want_grad) {
  offload_active_ = want_grad && offload_layers_ > 0;  // a forward without a backward needs nothing back
  if (!offload_) return;
  // Copies of the previous step nobody waited for (the last inputs stayed on the device): the compute stream
  // waits for them before the staging buffers are written again.
  Offload& o = *offload_;
  for (int& t : o.out_ticket)
    if (t >= 0) o.copier.wait(t), t = -1;
  for (int& t : o.in_ticket)
    if (t >= 0) o.copier.wait(t), t = -1;
  o.stage_holds[0] = o.stage_holds[1] = -1;
}

void Model::offload_after_forward(int layer) {
  if (!offload_active_ || layer >= offload_layers_) return;
  Offload& o = *offload_;
  o.out_ticket[size_t(layer)] = o.copier.to_host(host_inputs_[size_t(layer)], residual_[size_t(layer)]);
  o.stage_holds[layer % 2] = layer;
}

void Model::offload_before_output(int layer) {
  // Block `layer` writes residual_[layer + 1]: staged when layer + 1 is offloaded, over layer - 1's input.
  if (!offload_active_) return;
  const int next = layer + 1;
  if (next >= offload_layers_ || next < 2) {
    if (next < offload_layers_) offload_->stage_holds[next % 2] = next;
    return;
  }
  Offload& o = *offload_;
  int& t = o.out_ticket[size_t(next - 2)];
  if (t >= 0) o.copier.wait(t), t = -1;
  o.stage_holds[next % 2] = next;
}

void Model::offload_prefetch(int layer) {
  if (!offload_active_ || layer < 0 || layer >= offload_layers_) return;
  Offload& o = *offload_;
  if (o.stage_holds[layer % 2] == layer) return;  // still on the device since the forward
  int& out = o.out_ticket[size_t(layer)];
  if (out >= 0) o.copier.wait(out), out = -1;  // (in stream order on the copy stream anyway)
  o.in_ticket[size_t(layer)] = o.copier.to_device(residual_[size_t(layer)], host_inputs_[size_t(layer)]);
  o.stage_holds[layer % 2] = layer;
}

void Model::offload_wait_input(int layer) {
  if (!offload_active_ || layer >= offload_layers_) return;
  offload_prefetch(layer);  // when not posted ahead
  Offload& o = *offload_;
  int& t = o.in_ticket[size_t(layer)];
  if (t >= 0) o.copier.wait(t), t = -1;
}

}  // namespace rt
