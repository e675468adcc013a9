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

}  // namespace devx
