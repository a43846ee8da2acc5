# SQLGROUP_SANITIZE: a comma-separated list of sanitizers every target is
# built and linked with, e.g. address,undefined or thread (CI runs both).
# A finding fails the test that made it: -fno-sanitize-recover=all turns
# UBSan's reports, which only print by default, into failures.
set(SQLGROUP_SANITIZE "" CACHE STRING
    "Sanitizers to build with: address,undefined or thread (empty: none)")
# Sources the library adds, and the environment tests run in.
set(SQLGROUP_SANITIZER_SOURCES "")
set(SQLGROUP_SANITIZER_TEST_ENV "")

if(SQLGROUP_SANITIZE)
  if(SQLGROUP_SANITIZE MATCHES "thread" AND SQLGROUP_SANITIZE MATCHES "address")
    message(FATAL_ERROR "SQLGROUP_SANITIZE: thread cannot be combined with address")
  endif()
  add_compile_options(-fsanitize=${SQLGROUP_SANITIZE} -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${SQLGROUP_SANITIZE})
  # Also for the CLI processes tests start. TSan, which would go on after a
  # report and fail only at exit (which a CLI child may never reach), stops
  # at the first as the others do.
  set(SQLGROUP_SANITIZER_TEST_ENV
      "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/lsan_suppressions.txt"
      "UBSAN_OPTIONS=print_stacktrace=1"
      "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1")
endif()

# Debian's Abseil is built without TSan, which then cannot see absl::Mutex
# (or a Status's reference count) order anything: src/tsan_absl.cc
# annotates our calls into it, linked in with a --wrap flag for each
# function it declares (SQLGROUP_DECLARE).
if(SQLGROUP_SANITIZE MATCHES "thread")
  # The mangled form of Abseil's inline namespace, e.g. 4absl7debian3.
  get_target_property(absl_include absl::base INTERFACE_INCLUDE_DIRECTORIES)
  find_file(SQLGROUP_ABSL_OPTIONS absl/base/options.h PATHS ${absl_include}
            NO_DEFAULT_PATH REQUIRED)
  file(STRINGS "${SQLGROUP_ABSL_OPTIONS}" absl_ns
       REGEX "^#define ABSL_OPTION_INLINE_NAMESPACE_NAME ")
  string(REGEX REPLACE ".* " "" absl_ns "${absl_ns}")
  string(LENGTH "${absl_ns}" absl_ns_length)
  set(absl_mangled_ns "4absl${absl_ns_length}${absl_ns}")

  set(shim "${PROJECT_SOURCE_DIR}/src/tsan_absl.cc")
  file(READ "${shim}" shim_text)
  string(REGEX MATCHALL "\nSQLGROUP_DECLARE\\([^\"\n]*\"_ZNK?\", \"[^\"\n]+\""
         declarations "${shim_text}")
  if(NOT declarations)
    message(FATAL_ERROR "${shim}: no SQLGROUP_DECLARE lines found")
  endif()
  foreach(declaration IN LISTS declarations)
    string(REGEX MATCH "\"(_ZNK?)\", \"([^\"]+)\"" unused "${declaration}")
    set(symbol "${CMAKE_MATCH_1}${absl_mangled_ns}${CMAKE_MATCH_2}")
    add_link_options("LINKER:--wrap=${symbol}")
  endforeach()
  # The linker also checks Abseil's own shared libraries, which call
  # Mutex::Lock, against the wrappers: pull them from libsqlgroup.a into
  # every link, also of a test that calls no Mutex itself.
  add_link_options("LINKER:--undefined=__wrap_${symbol}")
  set_source_files_properties("${shim}" PROPERTIES
    COMPILE_DEFINITIONS "SQLGROUP_ABSL_MANGLED_NS=\"${absl_mangled_ns}\"")
  list(APPEND SQLGROUP_SANITIZER_SOURCES "${shim}")
endif()
