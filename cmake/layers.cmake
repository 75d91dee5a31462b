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
