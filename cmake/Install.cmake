# Install rules of the daemon, the CLI and their files, then the Debian package (Package.cmake).
# Included at the end of the top-level CMakeLists.txt, once every target exists. The client
# library installs its own files (library, headers, CMake and pkg-config files) from client/;
# the package holds everything `cmake --install` installs, theirs included.
#
# For prefix /usr (the package) the layout is Debian bookworm's:
#   /usr/bin/batond, /usr/bin/baton
#   /lib/systemd/system/batond.service
#   /etc/baton/batond.conf                      (a conffile)
#   /usr/share/man/man8/batond.8.gz, /usr/share/man/man1/baton.1.gz
#   /usr/share/doc/baton/{README.md,*.md,copyright}
include(GNUInstallDirs)

# A change of VERSION reconfigures (project() reads it).
set_property(DIRECTORY "${PROJECT_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
  "${PROJECT_SOURCE_DIR}/VERSION")

install(TARGETS batond baton RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The unit and the config live outside the prefix for prefix /usr: /lib/systemd/system (where
# bookworm's packages put units) and /etc. Any other prefix gets them below it, so that a staged
# `cmake --install build --prefix /tmp/x` never writes to the host's /etc. The choice is made at
# install time because `--prefix` (and CPack, which installs with prefix /usr) override the
# configured prefix then; file(INSTALL) honours DESTDIR and records both files in the manifest.
string(CONFIGURE [[
  if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
    set(_baton_unitdir "/lib/systemd/system")
    set(_baton_sysconfdir "/etc")
  else()
    set(_baton_unitdir "${CMAKE_INSTALL_PREFIX}/lib/systemd/system")
    set(_baton_sysconfdir "${CMAKE_INSTALL_PREFIX}/etc")
  endif()
  file(INSTALL DESTINATION "${_baton_unitdir}" TYPE FILE
    FILES "@PROJECT_SOURCE_DIR@/deploy/systemd/batond.service")
  file(INSTALL DESTINATION "${_baton_sysconfdir}/baton" TYPE FILE
    FILES "@PROJECT_SOURCE_DIR@/deploy/systemd/batond.conf")
]] _baton_install_system_files @ONLY)
install(CODE "${_baton_install_system_files}")

# Man pages from the binaries' --help (help2man runs them at build time), with the sections in
# cmake/man/*.h2m; baton(1) also gets every command's --help (cmake/man/ManCommands.cmake).
find_program(BATON_HELP2MAN help2man)
if(BATON_HELP2MAN)
  set(_baton_man_dir "${PROJECT_BINARY_DIR}/man")
  set(_baton_man_src "${CMAKE_CURRENT_LIST_DIR}/man")
  # baton_man(<target> <section> <name line> <help2man include file>):
  # ${_baton_man_dir}/<target>.<section>.gz, installed in share/man.
  function(baton_man target section name include)
    set(page "${_baton_man_dir}/${target}.${section}")
    add_custom_command(OUTPUT "${page}.gz"
      COMMAND ${BATON_HELP2MAN} --no-info --section=${section}
              "--version-string=${PROJECT_VERSION}" "--name=${name}" "--include=${include}"
              "--output=${page}" $<TARGET_FILE:${target}>
      COMMAND gzip -9nf "${page}"
      DEPENDS ${target} "${include}"
      COMMENT "Generating man page ${target}.${section} (help2man)"
      VERBATIM)
    install(FILES "${page}.gz" DESTINATION "${CMAKE_INSTALL_MANDIR}/man${section}")
  endfunction()
  file(MAKE_DIRECTORY "${_baton_man_dir}")
  add_custom_command(OUTPUT "${_baton_man_dir}/baton.h2m"
    COMMAND ${CMAKE_COMMAND} -DBATON=$<TARGET_FILE:baton> "-DOUTPUT=${_baton_man_dir}/baton.h2m"
            "-DSTATIC=${_baton_man_src}/baton.h2m" -DBUILD_BINDIR=$<TARGET_FILE_DIR:baton>
            "-DINSTALL_BINDIR=${CMAKE_INSTALL_FULL_BINDIR}"
            -P "${_baton_man_src}/ManCommands.cmake"
    DEPENDS baton "${_baton_man_src}/baton.h2m" "${_baton_man_src}/ManCommands.cmake"
    VERBATIM)
  baton_man(batond 8 "the Baton collective-communication daemon" "${_baton_man_src}/batond.h2m")
  baton_man(baton 1 "command-line tool for Baton clusters" "${_baton_man_dir}/baton.h2m")
  add_custom_target(baton_man ALL
    DEPENDS "${_baton_man_dir}/batond.8.gz" "${_baton_man_dir}/baton.1.gz")
else()
  message(WARNING "help2man not found (Debian: help2man): no man pages are built or installed")
endif()

file(GLOB _baton_docs CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/docs/*.md")
install(FILES "${PROJECT_SOURCE_DIR}/README.md" ${_baton_docs}
  "${PROJECT_SOURCE_DIR}/cmake/debian/copyright"
  DESTINATION "${CMAKE_INSTALL_DOCDIR}")

include("${CMAKE_CURRENT_LIST_DIR}/Package.cmake")
