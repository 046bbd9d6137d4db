
import torch, toy_kernels
for f in range(600):
    toy_kernels.toy_scale(torch.randn(100 + 16 * (f % 3)), factor=1.0 + f)
