# Layers as include paths (DESIGN.md, "Layers"): each layer's targets see the
# source tree through a view that holds only the layers at or below theirs,
# so an include that reaches up ("runtime/..." from a transport) does not
# compile. scripts/check_layers.sh says the same in words and runs in CI and
# in the build; the views make the compiler say it too.
#
#   rcoll_layer_includes(<target> <layer>...)
#
# gives <target> the public API (include/) and a view of the named source
# folders: ${CMAKE_BINARY_DIR}/layers/<target>/<layer> -> <source>/<layer>.
function(rcoll_layer_includes target)
  set(view ${CMAKE_BINARY_DIR}/layers/${target})
  file(REMOVE_RECURSE ${view})
  file(MAKE_DIRECTORY ${view})
  foreach(layer IN LISTS ARGN)
    if(NOT IS_DIRECTORY ${PROJECT_SOURCE_DIR}/${layer})
      message(FATAL_ERROR "rcoll_layer_includes(${target}): no layer ${layer}")
    endif()
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${layer} ${view}/${layer} SYMBOLIC)
  endforeach()
  target_include_directories(${target} PRIVATE ${view} ${PROJECT_SOURCE_DIR}/include)
endfunction()

# The header check: every header of a layer compiles on its own, included
# twice, seeing only its layer's view. A header that leans on what its
# includer included before it, lacks its guard, or reaches up fails the build
# (target rcoll_<name>_headers, part of `all`).
#
#   rcoll_check_headers(<name> <folder> <layer>...)
#
# checks every *.h under <folder> (a source folder; headers under include/
# are included as the public API names them, "rcoll/x.h").
function(rcoll_check_headers name folder)
  file(GLOB_RECURSE headers RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${folder}/*.h)
  set(sources)
  foreach(header IN LISTS headers)
    string(REGEX REPLACE "^include/" "" included ${header})
    string(MAKE_C_IDENTIFIER ${header} id)
    set(source ${CMAKE_BINARY_DIR}/header_check/${id}.cc)
    file(CONFIGURE OUTPUT ${source} CONTENT "#include \"${included}\"\n#include \"${included}\"\n" @ONLY)
    list(APPEND sources ${source})
  endforeach()
  add_library(rcoll_${name}_headers OBJECT ${sources})
  rcoll_layer_includes(rcoll_${name}_headers ${ARGN})
  target_link_libraries(rcoll_${name}_headers PRIVATE Boost::headers)
endfunction()
