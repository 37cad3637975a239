// Declares the per-backend implementations of every op in kernels/ops.h and kernels/attention.h, with the
// same signatures, in namespace rt::<backend> (rt::cpu in kernels/cpu/, rt::cuda in kernels/cuda/).
// kernels/ops.cpp dispatches to them on the tensors' device.
// Included inside the backend namespace; keep it C++17 (nvcc compiles it).
void gemm(Tensor c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta);
void rmsnorm_fwd(Tensor out, Tensor rstd, const Tensor& x, const Tensor& weight, float eps);
void rmsnorm_bwd(Tensor dx, Tensor dweight, const Tensor& dout, const Tensor& x, const Tensor& weight,
                 const Tensor& rstd);
void rope(Tensor x, const Tensor& positions, const RopeFreqs& freqs, bool inverse);
void gelu_fwd(Tensor out, const Tensor& x);
void gelu_bwd(Tensor dx, const Tensor& dout, const Tensor& x);
void swiglu_fwd(Tensor out, const Tensor& gate, const Tensor& up);
void swiglu_bwd(Tensor dgate, Tensor dup, const Tensor& dout, const Tensor& gate, const Tensor& up);
void embedding_fwd(Tensor out, const Tensor& tokens, const Tensor& table);
void embedding_bwd(Tensor dtable, const Tensor& dout, const Tensor& tokens);
void cross_entropy(Tensor logits, const Tensor& targets, Tensor losses, float grad_scale, bool want_grad);
void adamw(Tensor param, const Tensor& grad, Tensor m, Tensor v, const AdamWArgs& args, Tensor param_lowp,
           const Tensor& grad_scale);
void grad_clip_scale(const Tensor& sumsq, Tensor scale, float max_norm);
void add_inplace(Tensor y, const Tensor& x);
void scale_inplace(Tensor y, float s);
void fill(Tensor y, float value);
void copy_cast(Tensor out, const Tensor& in);  // same device only; ops.cpp handles host<->device
double sum_squares(const Tensor& x);
void sum_squares_accumulate(const Tensor& x, Tensor acc);
void attn_state_reset(AttnState& state);
void attn_fwd_block(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& state, const AttnMask& mask);
void attn_fwd_finalize(const AttnState& state, Tensor out, Tensor lse);
void attn_fwd_whole(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& scratch, const AttnMask& mask,
                    Tensor out, Tensor lse);
void attn_bwd_delta(const Tensor& out, const Tensor& dout, Tensor delta);
void attn_bwd_block(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                    const Tensor& delta, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc, const AttnMask& mask);
void attn_bwd_block_fresh(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                          const Tensor& delta, Tensor dq_acc, Tensor dk, Tensor dv, const AttnMask& mask);
