// C++ call stacks for diagnostics that keep one per allocation (memory checker, memory history):
// captured as raw return addresses, which is cheap, and named only when a report or snapshot is
// made, which is not.
#pragma once

#include <string>
#include <vector>

namespace devx {

// The return addresses of the calling thread's stack, innermost first, without the `skip`
// innermost frames (this function's own frame is never included).
std::vector<void*> capture_native_stack(int skip, int max_frames);
// The demangled name of the function holding `pc` ("" if unknown; "+0x<offset>" for a hidden
// symbol, which is what addr2line needs), and the library it is in.
std::string native_symbol(void* pc, std::string* library);
// "    #i name (library)" lines, stopping at the interpreter's own frames.
std::string format_native_stack(const std::vector<void*>& pcs);

}  // namespace devx
