#!/usr/bin/env python3
"""tests/ref/opt_adagrad.py - PyTorch (CPU, float32) reference for opt-adagrad: the
trajectory of torch.optim.Adagrad (foreach=False) over T steps, for several settings of
lr, lr_decay, weight_decay, initial_accumulator_value and eps. Checked by
tests/test-opt-adagrad.c.

Usage: opt_adagrad.py FIXTURE

Fixture layout (little-endian):
  uint32 magic 0x41474D47 ("GMGA"), uint32 version 1, int64 ncases, then per case:
  float64 lr, lr_decay, weight_decay, initial_accumulator_value, eps,
  int64 n, T,
  float32 p0 [n], grads [T, n], params after each step [T, n], final sum [n]
"""
import struct
import sys

import torch

MAGIC = 0x41474D47
VERSION = 1

# (lr, lr_decay, weight_decay, initial_accumulator_value, eps): torch's defaults, then
# each option alone, then all of them together
CASES = [
    (0.01, 0.0, 0.0, 0.0, 1e-10),
    (0.1, 0.05, 0.0, 0.0, 1e-10),
    (0.05, 0.0, 0.1, 0.0, 1e-10),
    (0.2, 0.0, 0.0, 0.5, 1e-10),
    (0.3, 0.01, 0.02, 0.1, 1e-6),
]


def f32(t):
    """float32 bytes of a tensor, row-major."""
    flat = t.detach().to(torch.float32).reshape(-1).tolist()
    return struct.pack("<%df" % len(flat), *flat)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: opt_adagrad.py FIXTURE")
    g = torch.Generator().manual_seed(20240611)
    n, T = 33, 20
    out = [struct.pack("<IIq", MAGIC, VERSION, len(CASES))]
    for lr, lr_decay, wd, init, eps in CASES:
        p0 = (torch.rand(n, generator=g) * 4 - 2).float()
        grads = ((torch.rand(T, n, generator=g) * 2 - 1)
                 * torch.linspace(0.1, 3.0, T).unsqueeze(1)).float()
        grads[:, 5] = 0.0           # an element that never sees a gradient
        grads[3, 7] = 0.0           # a zero gradient in the middle of the run
        p = p0.clone().requires_grad_()
        opt = torch.optim.Adagrad([p], lr=lr, lr_decay=lr_decay, weight_decay=wd,
                                  initial_accumulator_value=init, eps=eps, foreach=False)
        traj = []
        for t in range(T):
            p.grad = grads[t].clone()
            opt.step()
            traj.append(p.detach().clone())
        state_sum = opt.state[p]["sum"]
        out.append(struct.pack("<5d2q", lr, lr_decay, wd, init, eps, n, T))
        out += [f32(p0), f32(grads), f32(torch.stack(traj)), f32(state_sum)]
    with open(sys.argv[1], "wb") as f:
        f.write(b"".join(out))


if __name__ == "__main__":
    main()
