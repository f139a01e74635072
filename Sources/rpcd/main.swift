import RPCDaemon

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

exit(Daemon.run(Array(CommandLine.arguments.dropFirst())))
