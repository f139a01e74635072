import CounterEntity
import RPCDaemon
import RPCEntities

#if canImport(Glibc)
import Glibc
#endif

// rpcd with a third entity: the one line below is all it takes to serve, journal, snapshot,
// describe and replicate `counter`.
Entities.register(CounterEntity.self)
exit(Daemon.run(Array(CommandLine.arguments.dropFirst())))
