// Every setting of the core and the Python package, declared once:
//   DEVX_SETTING(NAME, KIND, DEFAULT, LO, HI, HELP)
// KIND is Bool, Int (within [LO, HI]) or Text (checked by the setting's listeners, if any).
// The vendor libraries' own settings (DEVX_SIM_*) are read by the vendor when it loads.
// No include guard: included once per expansion.

DEVX_SETTING(DIPU_FORCE_FALLBACK_OPS_LIST, Text, "", 0, 0,
             "ops run on the CPU fallback: comma-separated regexes of overload names")
DEVX_SETTING(DIPU_DUMP_OP_ARGS, Int, "0", 0, 3, "log each op: 1 name, 2 + argument metadata, 3 + values")
DEVX_SETTING(DEVX_DUMP_OP_ARGS_MAX_ELEMENTS, Int, "16", 0, INT32_MAX,
             "values printed per tensor at DIPU_DUMP_OP_ARGS=3 (head and tail; statistics beyond)")
DEVX_SETTING(DIPU_AUTOCOMPARE, Bool, "0", 0, 0, "compare every op with the CPU")
DEVX_SETTING(DIPU_AUTOCOMPARE_OPS_LIST, Text, "", 0, 0, "compare the ops matching these regexes with the CPU")
DEVX_SETTING(DIPU_AUTOCOMPARE_RAISE, Bool, "0", 0, 0, "an autocompare mismatch raises instead of warning")
DEVX_SETTING(DIPU_MEM_CHECK, Bool, "0", 0, 0, "the memory checker: live allocations with their origin")
DEVX_SETTING(DIPU_MEM_CHECK_ENABLE_BACKTRACE, Bool, "0", 0, 0, "the memory checker keeps a C++ backtrace per allocation")
DEVX_SETTING(DIPU_MEM_CHECK_LOG_INTERVAL, Int, "0", 0, INT64_MAX, "a memory-check summary every N allocations")
DEVX_SETTING(DEVX_SIM_SANITIZE, Bool, "0", 0, 0, "the memory sanitizer: guard zones, poison, quarantine")
DEVX_SETTING(DEVX_TRACE_RUNTIME, Text, "", 0, 0, "log vendor calls of these kinds: malloc=1,memcpy=2,... or all=1")
DEVX_SETTING(DEVX_LOG_LEVEL, Text, "WARN", 0, 0, "log level, for all modules or per module: WARN,ALLOC=DEBUG")
DEVX_SETTING(DEVX_LOG_PATH, Text, "", 0, 0, "folder of the log file devx_<pid>.log (empty: stderr)")
DEVX_SETTING(DEVX_ALLOC_CONF, Text, "", 0, 0, "caching allocator settings, as PYTORCH_CUDA_ALLOC_CONF (read at start)")
DEVX_SETTING(DEVX_MOCK_CUDA, Bool, "1", 0, 0, "CUDA mocking: \"cuda\" means devx (read at import)")
DEVX_SETTING(DIPU_MOCK_CUDA, Bool, "1", 0, 0, "DIPU's name of DEVX_MOCK_CUDA (read at import)")
DEVX_SETTING(DEVX_DEVICE_AS_CUDA, Bool, "0", 0, 0, "Tensor.device reports devx tensors as cuda (read at import)")
DEVX_SETTING(DIPU_PYTHON_DEVICE_AS_CUDA, Bool, "0", 0, 0, "DIPU's name of DEVX_DEVICE_AS_CUDA (read at import)")
DEVX_SETTING(DEVX_DIST_CHECK, Bool, "1", 0, 0, "devx process groups check each collective across ranks")
DEVX_SETTING(DEVX_VENDOR, Text, "", 0, 0, "the vendor: a name, a library path, or empty for the best usable (read at import)")
DEVX_SETTING(DEVX_VENDOR_PATH, Text, "", 0, 0, "folders searched for vendor libraries (read at import)")
