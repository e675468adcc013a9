# find_package(torch_devx) for vendor libraries: the target torch_devx::vendor_headers carries the
# include directory of vendor_api.h, devx_kernel_abi.h and the generated devx_kernels.h.
get_filename_component(_devx_root "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(torch_devx_INCLUDE_DIR "${_devx_root}/include")
if(NOT EXISTS "${torch_devx_INCLUDE_DIR}/devx_kernels.h")
  set(torch_devx_FOUND FALSE)
  set(torch_devx_NOT_FOUND_MESSAGE "torch_devx at ${_devx_root} has no headers (build it first)")
  return()
endif()
if(NOT TARGET torch_devx::vendor_headers)
  add_library(torch_devx::vendor_headers INTERFACE IMPORTED)
  set_target_properties(torch_devx::vendor_headers PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${torch_devx_INCLUDE_DIR}")
endif()
set(torch_devx_FOUND TRUE)
