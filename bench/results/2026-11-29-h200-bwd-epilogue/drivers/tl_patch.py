# Session tool (not project code): instruments bwd v5 with a per-CTA clock64 timeline (slots 0-5, gt, sm).
import sys
root=sys.argv[1]
f=root+'/kernels/cuda/attn_bwd_wgmma.cu'
s=open(f).read()
def rep(old,new):
    global s
    assert s.count(old)==1,(old[:60],s.count(old)); s=s.replace(old,new)
hdr='''namespace rt {
namespace cuda {
__device__ unsigned long long* g_bwd_timeline = nullptr;  // (ctas, 8) profiling only
void attn_bwd_timeline_attach(unsigned long long* p) { CUDA_CHECK(cudaMemcpyToSymbol(g_bwd_timeline, &p, sizeof(p))); }
}  // namespace cuda
}  // namespace rt
#define RT_TL(slot) do { unsigned long long* tl_ = g_bwd_timeline; if (tl_) { \\
  const size_t cta_ = blockIdx.x; \\
  unsigned long long c_; asm volatile("mov.u64 %0, %%clock64;" : "=l"(c_)); tl_[cta_ * 8 + (slot)] = c_; } } while (0)
'''
rep('namespace rt {\nnamespace cuda {\nnamespace {\n', hdr+'namespace rt {\nnamespace cuda {\nnamespace {\n')
k=s.index('attn_bwd_wgmma_v5_kernel(const __grid_constant__')
pre, s = s[:k], s[k:]
rep('''  const int tid = int(threadIdx.x);
  // wg through''','''  const int tid = int(threadIdx.x);
  if (tid == 0) {
    RT_TL(0);
    unsigned long long gt; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(gt));
    unsigned sm; asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    unsigned long long* tl_ = g_bwd_timeline;
    if (tl_) { const size_t cta_ = blockIdx.x;
      tl_[cta_ * 8 + 6] = gt; tl_[cta_ * 8 + 7] = sm; }
  }
  // wg through''')
rep('''    mbar_wait(full_bar + 8 * st, uint32_t(j >> 1) & 1u);  // this stage's Q, dO, lse, delta landed
''','''    mbar_wait(full_bar + 8 * st, uint32_t(j >> 1) & 1u);  // this stage's Q, dO, lse, delta landed
    if (tid == 0 && j == 0) RT_TL(1);
    if (tid == 0 && j == 8) RT_TL(2);
''')
rep('''  named_bar_sync(kBarDs, 256);
  const uint32_t dk_stage''','''  if (tid == 0) RT_TL(3);
  named_bar_sync(kBarDs, 256);
  const uint32_t dk_stage''')
rep('''    bulk_wait_read<0>();  // the staging must outlive the reads; the writes complete with the kernel
''','''    bulk_wait_read<0>();  // the staging must outlive the reads; the writes complete with the kernel
    if (tid == 0) RT_TL(4);
''')
rep('''      if (lane == 0) bulk_wait<0>();
    }
    return;''','''      if (lane == 0) { bulk_wait<0>(); RT_TL(5); }
    }
    return;''')
open(f,'w').write(pre+s)
# bench hook: take it from the old diff's bench part
