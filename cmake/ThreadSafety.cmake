# SQLGROUP_THREAD_SAFETY: clang checks every ABSL_GUARDED_BY and
# ABSL_EXCLUSIVE_LOCKS_REQUIRED at compile time (-Wthread-safety);
# unchecked, the annotations are only comments. -Werror makes a finding,
# like any other warning of this build, fail it.
option(SQLGROUP_THREAD_SAFETY "Check lock annotations (clang only), warnings as errors" OFF)

if(SQLGROUP_THREAD_SAFETY)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "SQLGROUP_THREAD_SAFETY needs clang (-DCMAKE_CXX_COMPILER=clang++)")
  endif()
  add_compile_options(-Wthread-safety -Werror)
endif()
