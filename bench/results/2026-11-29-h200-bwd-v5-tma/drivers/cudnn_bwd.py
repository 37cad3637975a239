# Session helper (not project code): one cuDNN SDPA forward+backward at the bench grid's d128 16K shape, for ncu.
import sys, torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
B, H, N, D = 2, 2048 // int(sys.argv[1]), 16384, int(sys.argv[1])
backend = SDPBackend.CUDNN_ATTENTION if sys.argv[2] == "cudnn" else SDPBackend.FLASH_ATTENTION
q, k, v = [torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3)]
g = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
with sdpa_kernel(backend):
    for _ in range(2):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=len(sys.argv) > 3)
        o.backward(g)
torch.cuda.synchronize()
