import Dispatch
import Foundation
import RPCEntities
import RPCSchema
import RPCTransport

extension Daemon {
    /// `rpcd serve`: start in stages, run until SIGTERM/SIGINT, stop in reverse order.
    ///
    /// 1. signals are caught (before anything binds, so an early SIGTERM is not lost);
    /// 2. the state is loaded;
    /// 3. listeners are bound and `listening on HOST:PORT` is logged for each;
    /// 4. on a signal: stop accepting, send what is owed, close, exit 0.
    static func serve(_ options: ServeOptions) -> Int32 {
        let log = Logger(level: options.logLevel)
        Syscall.ignoreSIGPIPE()
        let fileLimit = Syscall.raiseFileLimit()
        let signals = SignalHandler(signals: [SIGTERM, SIGINT])

        // Addresses are checked before any work, so a typo fails fast.
        var addresses: [SocketAddress] = []
        for text in options.listen {
            guard let address = SocketAddress(parsing: text) else {
                log.error("--listen '\(text)' is not HOST:PORT with a numeric IPv4 or [IPv6] host, e.g. 127.0.0.1:7878")
                return 2
            }
            addresses.append(address)
        }

        // State.
        let dispatcher = Dispatcher(onCounterRequest: { request in
            log.debug("counter-request \(request.method) id \(request.id) received; not answered")
        })

        // Listeners.
        let server = Server(
            dispatcher: dispatcher, durability: nil,
            limits: Connection.Limits(maxFrameBytes: options.maxFrameBytes, maxOutputBytes: options.maxOutputBytes),
            loopCount: ProcessInfo.processInfo.activeProcessorCount, log: log)
        do {
            try server.listen(on: addresses)
        } catch {
            log.error("cannot listen: \(error); pick a free port with --listen HOST:PORT (port 0 picks one)")
            return 1
        }
        log.info("rpcd \(CommandLineParser.version) serving \(addresses.count) listener(s), up to \(fileLimit) open files; SIGTERM or SIGINT stops it")

        // Shutdown, in reverse order of the start.
        signals.onSignal { signal in
            log.info("received \(signal == SIGTERM ? "SIGTERM" : "SIGINT"); stopping: answering what was received, then exiting")
            server.stop(grace: .seconds(3)) {
                log.info("stopped")
                exit(0)
            }
        }
        dispatchMain()
    }
}
