// The user's place in the Python program, read from the interpreter's frames: what the core's
// diagnostics report as "where" (runtime/python_hooks.h). Safe on any thread: threads Python does
// not know, and a process whose interpreter is shutting down, get empty answers.
#pragma once

#include <string>
#include <vector>

#include "runtime/python_hooks.h"

namespace devx::python {

// The folders whose files are library code, not the user's (torch_devx._frames.LIBRARY_DIRS),
// each ending in a separator. Set once at import, before any op can be diagnosed.
void set_library_dirs(std::vector<std::string> dirs);

// The innermost frame of the user's code (no file when no frame is the user's).
PythonSite python_site();
// "file.py:42" of python_site(), "" when no frame is the user's.
std::string python_location();
// The whole stack as traceback.format_stack() prints it.
std::string python_stack();
// The whole stack as frames, innermost first.
std::vector<PythonFrame> python_frames();
// torch_devx._frames.module_path() for the calling thread; "" where Python cannot be asked.
std::string python_module_path();

}  // namespace devx::python
