/* Vendors broken in one way each (chosen with -D when the test compiles this file), built from
 * the skeleton vendor: the core must turn each into a Python exception naming the vendor. Also
 * VERSION_4_TABLE, an older table the core must still load. */
#define devx_vendor_get_api skeleton_get_api
#include "skeleton.c"
#undef devx_vendor_get_api

#ifdef FAILING_KERNEL
static DevxStatus failing_add(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* other,
                              const DevxScalar* alpha, DevxTensor* out) {
  (void)ctx;
  (void)self;
  (void)other;
  (void)alpha;
  (void)out;
  return fail(DEVX_ERROR, "the add kernel hit a device fault");
}

static const DevxVendorKernel failing_kernels[] = {
    {"add.out", (void*)(DevxKernel_add_out)failing_add},
    {"copy.out", (void*)(DevxKernel_copy_out)copy_out},
    {NULL, NULL},
};
#endif

#ifdef NULL_KERNEL
static const DevxVendorKernel null_kernels[] = {{"add.out", NULL}, {NULL, NULL}};
#endif

#ifndef NO_ENTRY
__attribute__((visibility("default"))) const DevxVendorApi* devx_vendor_get_api(void) {
  static DevxVendorApi api;
  api = *skeleton_get_api();
#ifdef WRONG_API_VERSION
  api.api_version = DEVX_VENDOR_API_VERSION + 1;
#endif
#ifdef VERSION_4_TABLE
  /* Not broken: a vendor built against version 4, whose table ends before host_access. What
   * lies past its end must never be read; garbage stands in for it here. */
  api.api_version = 4;
  api.host_access = (const DevxHostAccessApi*)(uintptr_t)0x10;
#endif
#ifdef WRONG_KERNEL_ABI
  api.kernel_abi_version = DEVX_KERNEL_ABI_VERSION + 1;
#endif
#ifdef NULL_FUNCTION
  api.memcpy_async = NULL;
#endif
#ifdef NULL_KERNEL
  api.kernels = null_kernels;
#endif
#ifdef FAILING_KERNEL
  api.kernels = failing_kernels;
#endif
  return &api;
}
#endif
