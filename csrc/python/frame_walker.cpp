// The Python C API directly, not pybind11: this file is compiled with the bindings, and pybind11
// would double its cost for a handful of calls.
#include "python/frame_walker.h"

#include <Python.h>
#include <frameobject.h>

#include <unordered_map>

#include "python/python_threads.h"

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

std::string utf8(PyObject* text) {
  const char* s = text ? PyUnicode_AsUTF8(text) : nullptr;
  if (!s) PyErr_Clear();
  return s ? s : "";
}

// What python_site() knows of a code object: whether it is library code and its file name. The
// cache holds a reference to each code object, so that a pointer is never reused by another, and is
// read and written under the GIL only.
struct CodeInfo {
  bool library;
  std::string file;
  // Line by instruction offset, for the offsets seen so far: Python finds a line by walking the
  // code object's line table from its start (~6,000 instructions in a long function or a
  // script's body), and ops issued in a loop come from the same few offsets again and again.
  std::unordered_map<int, int> lines;
};

CodeInfo& code_info(PyCodeObject* code) {
  static auto* cache = new std::unordered_map<PyCodeObject*, CodeInfo>();  // leaked: used during teardown
  auto it = cache->find(code);
  if (it != cache->end()) return it->second;
  std::string file = utf8(code->co_filename);
  const bool library = is_library_file(file);
  Py_INCREF(code);
  return cache->emplace(code, CodeInfo{library, std::move(file), {}}).first->second;
}

int line_of(PyFrameObject* frame, CodeInfo& info) {
#if PY_VERSION_HEX >= 0x030B0000
  const int offset = PyFrame_GetLasti(frame);
  auto it = info.lines.find(offset);
  if (it != info.lines.end()) return it->second;
  return info.lines.emplace(offset, PyFrame_GetLineNumber(frame)).first->second;
#else
  (void)info;
  return PyFrame_GetLineNumber(frame);
#endif
}

// Holds the GIL for its scope.
class Gil {
 public:
  Gil() : state_(PyGILState_Ensure()) {}
  ~Gil() { PyGILState_Release(state_); }
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

 private:
  PyGILState_STATE state_;
};

// Reports a Python error raised by `what` as Python reports errors it cannot raise, and clears it.
void discard_error(const char* what) {
  PyObject* context = PyUnicode_FromString(what);
  PyErr_WriteUnraisable(context);
  Py_XDECREF(context);
}

}  // namespace

void set_library_dirs(std::vector<std::string> dirs) {
  library_dirs() = std::move(dirs);
}

// Cheap enough for every op issued asynchronously: a code object's verdict and name are looked up
// once, and only the user's frame has its line computed.
PythonSite python_site() {
  if (!may_read_python_frames()) return {};
  Gil gil;
  PyFrameObject* frame = PyEval_GetFrame();
  Py_XINCREF(frame);
  PythonSite site;
  while (frame && site.file == nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    CodeInfo& info = code_info(code);
    Py_DECREF(code);
    if (!info.library) site = {&info.file, line_of(frame, info)};
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
  Gil gil;
  PyObject* traceback = PyImport_ImportModule("traceback");
  PyObject* frames = traceback ? PyObject_CallMethod(traceback, "format_stack", nullptr) : nullptr;
  Py_XDECREF(traceback);
  std::string out;
  if (frames && PyList_Check(frames)) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(frames); ++i) out += "      " + utf8(PyList_GET_ITEM(frames, i));
  } else {
    discard_error("traceback.format_stack");
  }
  Py_XDECREF(frames);
  return out;
}

std::vector<PythonFrame> python_frames() {
  std::vector<PythonFrame> out;
  if (!may_read_python_frames()) return out;
  Gil gil;
  PyFrameObject* frame = PyEval_GetFrame();
  Py_XINCREF(frame);
  while (frame) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    out.push_back({utf8(code->co_filename), PyFrame_GetLineNumber(frame), utf8(code->co_name)});
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  return out;
}

std::string python_module_path() {
  if (!may_read_python_frames()) return "";
  Gil gil;
  PyObject* frames = PyImport_ImportModule("torch_devx._frames");
  PyObject* path = frames ? PyObject_CallMethod(frames, "module_path", nullptr) : nullptr;
  Py_XDECREF(frames);
  std::string out;
  if (path && PyUnicode_Check(path)) {
    out = utf8(path);
  } else if (!path) {
    discard_error("torch_devx._frames.module_path");
  }
  Py_XDECREF(path);
  return out;
}

}  // namespace devx::python
