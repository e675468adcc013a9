// Whether the installed torch has the kineto plugin registry for PrivateUse1 (torch 2.13 has it;
// older versions only have the legacy profiler stubs). USE_KINETO is set by the build when the
// wheel ships kineto's headers.
#pragma once

#if defined(USE_KINETO) && __has_include(<torch/csrc/profiler/standalone/privateuse1_profiler.h>)
#define DEVX_HAS_KINETO_PLUGIN 1
#else
#define DEVX_HAS_KINETO_PLUGIN 0
#endif
