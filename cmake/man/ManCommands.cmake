# cmake -P script: writes a help2man include file for baton(1) holding every command's --help.
# -DBATON=<baton binary> -DOUTPUT=<file> -DSTATIC=<include file appended verbatim>
# -DBUILD_BINDIR=<dir of the built binaries> -DINSTALL_BINDIR=<where they are installed>
# The CLI's defaults name the directory batond sits in (the build tree here) and root's uid;
# the page says where the package puts batond instead, and UID.
set(commands local bench status links topo comm-id)
set(text "[COMMAND OPTIONS]\n")
foreach(command IN LISTS commands)
  execute_process(COMMAND "${BATON}" ${command} --help
    OUTPUT_VARIABLE help RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "baton ${command} --help exited with ${result}")
  endif()
  string(REPLACE "${BUILD_BINDIR}/" "${INSTALL_BINDIR}/" help "${help}")
  # (root's uid 0 is one digit: two spaces fewer keep the column.)
  string(REGEX REPLACE "/tmp/baton-local-[0-9]  " "/tmp/baton-local-UID" help "${help}")
  string(REGEX REPLACE "/tmp/baton-local-[0-9]+" "/tmp/baton-local-UID" help "${help}")
  # roff: backslashes escaped, no line may start a request, dashes are minus signs.
  string(REPLACE "\\" "\\e" help "${help}")
  string(REPLACE "-" "\\-" help "${help}")
  string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" help "${help}")
  string(APPEND text ".SS \"baton ${command}\"\n.nf\n${help}.fi\n")
endforeach()
file(READ "${STATIC}" static)
file(WRITE "${OUTPUT}" "${text}\n${static}")
