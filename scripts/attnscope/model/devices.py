"""The device a model runs on, resolved once from the `device` setting (`pick_device`), and
the checks that it and the `compute_dtype` work on this machine."""

from __future__ import annotations


def cuda_visible() -> bool | None:
    """Whether torch sees a CUDA device; None where torch is not installed (a driver
    environment without it: the jobs check in their own)."""
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda.is_available()


def check_local_device(setting: str, compute_dtype: str = "float32") -> None:
    """Before any job of a local run: `device: cuda` (or cuda:N) needs a CUDA device torch
    can see (the N-th: `pick_device`), and `compute_dtype` must run on the device
    (`check_compute_dtype`)."""
    visible = cuda_visible()
    if setting.startswith("cuda") and visible is False:
        raise RuntimeError(
            f"config: device is {setting}, but torch sees no CUDA device on this machine; use "
            "device: auto or cpu here, or run on GPU nodes (--profile profiles/slurm)"
        )
    if visible is not None:
        check_compute_dtype(compute_dtype, pick_device(setting) if visible else "cpu")


def check_compute_dtype(name: str, device: str) -> None:
    """Before a model runs: the `compute_dtype` setting must work on `device` with this torch
    build (a GPU without native bfloat16, a CPU build without float16 kernels)."""
    import torch

    dtype = getattr(torch, name)
    problem = None
    try:
        x = torch.ones(2, 8, dtype=dtype, device=device)
        torch.nn.functional.layer_norm(x @ x.T, (2,)).softmax(-1).sum().item()
    except (RuntimeError, TypeError, AssertionError) as error:  # no kernel, no CUDA build
        problem = str(error)
    if problem is None and device.startswith("cuda") and dtype is torch.bfloat16:
        if not torch.cuda.is_bf16_supported(including_emulation=False):
            problem = "the GPU has no native bfloat16"
    if problem is not None:
        raise RuntimeError(
            f"config: compute_dtype is {name}, which this torch build cannot run on {device} "
            f"({problem}); use compute_dtype: float32"
        )


def pick_device(setting: str) -> str:
    """Resolve the `device` setting to a torch device string: "cpu"; "cuda" or "cuda:N" (a GPU
    torch sees, N < their count); "auto" (cuda where torch sees one, else cpu). Anything else
    is refused, naming the setting: no device is swapped for another silently."""
    import torch

    if setting == "cpu":
        return "cpu"
    if setting == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    index = str(setting).removeprefix("cuda:") if str(setting).startswith("cuda:") else None
    if setting != "cuda" and not (index and index.isascii() and index.isdigit()):
        raise ValueError(f"device: {setting!r} is not one of auto, cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise RuntimeError(f"device: {setting} was asked for, but torch sees no CUDA device")
    count = torch.cuda.device_count()
    if index is not None and int(index) >= count:
        raise RuntimeError(
            f"device: {setting} was asked for, but torch sees {count} CUDA device(s): "
            f"cuda:0 to cuda:{count - 1}"
        )
    return setting
