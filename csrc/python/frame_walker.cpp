#include "python/frame_walker.h"

#include <unordered_map>

// Python.h (through pybind11) before frameobject.h, which does not include it.
#include <pybind11/pybind11.h>
#include <frameobject.h>

#include "python/python_threads.h"

namespace py = pybind11;

namespace devx::python {
namespace {

// Read without a lock: written once at import, before any op can be diagnosed.
std::vector<std::string>& library_dirs() {
  static auto* dirs = new std::vector<std::string>();  // leaked: read by reports during teardown
  return *dirs;
}

// The same test as torch_devx._frames.is_library_file, for the file names Python keeps in code
// objects (absolute for every imported module and the main script).
bool is_library_file(const std::string& file) {
  if (file.rfind("<frozen ", 0) == 0 || file.rfind("<built-in", 0) == 0) return true;
  for (const std::string& dir : library_dirs()) {
    if (file.compare(0, dir.size(), dir) == 0) return true;
  }
  return false;
}

// What python_site() knows of a code object: whether it is library code and its file name. The
// cache holds a reference to each code object, so that a pointer is never reused by another, and is
// read and written under the GIL only.
struct CodeInfo {
  bool library;
  std::string file;
};

const CodeInfo& code_info(PyCodeObject* code) {
  static auto* cache = new std::unordered_map<PyCodeObject*, CodeInfo>();  // leaked: used during teardown
  auto it = cache->find(code);
  if (it != cache->end()) return it->second;
  std::string file = py::cast<std::string>(py::handle(code->co_filename));
  const bool library = is_library_file(file);
  Py_INCREF(code);
  return cache->emplace(code, CodeInfo{library, std::move(file)}).first->second;
}

}  // namespace

void set_library_dirs(std::vector<std::string> dirs) {
  library_dirs() = std::move(dirs);
}

// Cheap enough for every op issued asynchronously: a code object's verdict and name are looked up
// once, and only the user's frame has its line computed.
PythonSite python_site() {
  if (!may_read_python_frames()) return {};
  py::gil_scoped_acquire gil;
  PyFrameObject* frame = PyEval_GetFrame();
  Py_XINCREF(frame);
  PythonSite site;
  while (frame && site.file == nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    const CodeInfo& info = code_info(code);
    Py_DECREF(code);
    if (!info.library) site = {&info.file, PyFrame_GetLineNumber(frame)};
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  return site;
}

std::string python_location() {
  return python_site().str();
}

std::string python_stack() {
  if (!may_read_python_frames()) return "";
  py::gil_scoped_acquire gil;
  py::list frames = py::module_::import("traceback").attr("format_stack")();
  std::string out;
  for (const auto& f : frames) out += "      " + py::cast<std::string>(f);
  return out;
}

std::vector<PythonFrame> python_frames() {
  std::vector<PythonFrame> out;
  if (!may_read_python_frames()) return out;
  py::gil_scoped_acquire gil;
  PyFrameObject* frame = PyEval_GetFrame();
  Py_XINCREF(frame);
  while (frame) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    const char* name = PyUnicode_AsUTF8(code->co_name);
    out.push_back({file ? file : "", PyFrame_GetLineNumber(frame), name ? name : ""});
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  return out;
}

std::string python_module_path() {
  if (!may_read_python_frames()) return "";
  py::gil_scoped_acquire gil;
  try {
    return py::cast<std::string>(py::module_::import("torch_devx._frames").attr("module_path")());
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("torch_devx._frames.module_path");
    return "";
  }
}

}  // namespace devx::python
