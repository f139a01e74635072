import Dispatch
import Foundation
import RPCEntities
import RPCSchema
import RPCTransport

/// The program: argv in, exit status out.
public enum Daemon {
    /// Runs `rpcd` with `arguments` (without the program name). Returns only for commands that
    /// finish; `serve` runs until a signal and exits the process itself.
    public static func run(_ arguments: [String]) -> Int32 {
        let command: Command
        do {
            command = try CommandLineParser.parse(arguments)
        } catch {
            LogSink.stderr.write("rpcd: \(error.message)\n")
            return 2
        }
        switch command {
        case .version:
            print("rpcd \(CommandLineParser.version)")
            return 0
        case .help:
            print(CommandLineParser.help)
            return 0
        case .serve(let options):
            let status = serve(options)
            // A start that failed logged why through the queue: let stderr have it before the exit.
            LogSink.stderr.flush(timeout: LogSink.exitFlushSeconds)
            return status
        case .subcommand(let name, let arguments):
            guard let run = Subcommands.all[name] else { return 2 }
            return run(arguments)
        }
    }
}

/// Turns signals into calls on a queue (Dispatch signal sources), installed before anything binds.
final class SignalHandler: @unchecked Sendable {
    // @unchecked: `sources` is set once in init; `handler` is guarded by `lock`.
    private let queue = DispatchQueue(label: "rpcd.signals")
    private var sources: [any DispatchSourceSignal] = []
    private let lock = NSLock()
    private var handler: (@Sendable (Int32) -> Void)?
    private var pending: [Int32] = []

    init(signals: [Int32]) {
        for number in signals {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { [unowned self] in self.deliver(number) }
            source.resume()
            sources.append(source)
        }
    }

    /// Sets the handler; a signal that arrived before it is delivered now.
    func onSignal(_ handler: @escaping @Sendable (Int32) -> Void) {
        let early: [Int32] = lock.withLock {
            self.handler = handler
            defer { pending = [] }
            return pending
        }
        for number in early { queue.async { handler(number) } }
    }

    private func deliver(_ number: Int32) {
        let handler: (@Sendable (Int32) -> Void)? = lock.withLock {
            if self.handler == nil { pending.append(number) }
            return self.handler
        }
        handler?(number)
    }
}
