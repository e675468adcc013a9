// CUDA mocking below Python: where the installed torch has no CUDA (a CPU build), "cuda" devices
// given to ATen mean devx ones. Factories reach the CUDA dispatch key with their device argument;
// a boxed fallback on that key rewrites the argument and dispatches again, so torch.zeros and the
// other builtins stay PyTorch's own functions (TorchScript, torch._refs, functorch and
// torch.device contexts recognise them). A device guard for the CUDA type forwards to devx's, for
// code that switches to the target device (torch.tensor(..., device="cuda"), .to("cuda")), and
// CUDA's lazy initialisation is marked done, since devx initialises itself.
#pragma once

namespace devx {

// Installs all three; false, with nothing installed, where torch has CUDA kernels or a CUDA guard
// of its own (there "cuda" is a real device, and mocking stays in Python).
bool install_cuda_alias();
// Restores the process: the fallback and the guard removed, CUDA's lazy initialisation pending.
void uninstall_cuda_alias();
bool cuda_alias_installed();

}  // namespace devx
