// Where the user's Python program is, for diagnostics that report it (memory checker, runtime
// trace, autocompare). The bindings install the providers; the runtime itself knows no Python.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace devx {

void set_python_hooks(std::function<std::string()> line, std::function<std::string()> stack);
// "file.py:42" of the innermost frame outside torch and torch_devx; "" without Python.
std::string python_line();
// The whole Python stack, formatted; "" without Python.
std::string python_stack();

struct PythonFrame {
  std::string filename;
  int line;
  std::string name;  // the function
};
// The Python stack as frames, innermost first (PyTorch's snapshot order); empty without Python.
void set_python_frames_hook(std::function<std::vector<PythonFrame>()> frames);
std::vector<PythonFrame> python_frames();

// The user's line as python_line() finds it, cheap enough to take for every op issued
// asynchronously (which reports a failure far from that line): `file` points to a name the
// provider keeps for the life of the process, so a site is copied freely and read on any thread.
struct PythonSite {
  const std::string* file = nullptr;
  int line = 0;
  std::string str() const { return file ? *file + ":" + std::to_string(line) : std::string(); }
};
void set_python_site_hook(PythonSite (*site)());
PythonSite python_site();

// The nn.Module running the calling thread's Python code, as "path (Class)" (path: attribute
// names from the outermost running module); "" outside any module or without Python.
void set_python_module_hook(std::string (*module_path)());
std::string python_module_path();

// Waiting for device work while holding Python's GIL deadlocks when that work needs the GIL: a
// stream's worker dropping the last reference but one to a tensor or storage that has a Python
// object decrefs that object (torch's PyObject preservation), and bindings such as
// UntypedStorage.copy_ or the legacy sparse constructors call into devx without releasing it.
// Every wait for device work (stream, event and device synchronisation) runs in this scope,
// which releases the GIL if the calling thread holds it; without Python it does nothing.
class WithoutGil {
 public:
  WithoutGil();
  ~WithoutGil();
  WithoutGil(const WithoutGil&) = delete;
  WithoutGil& operator=(const WithoutGil&) = delete;

 private:
  void* saved_;
};
// release: releases the GIL if this thread holds it and returns what restore needs (nullptr if
// it did nothing).
void set_gil_hooks(void* (*release)(), void (*restore)(void*));

}  // namespace devx
