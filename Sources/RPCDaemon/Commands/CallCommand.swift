import Dispatch
import Foundation
import RPCClient
import RPCEntities
import RPCSchema
import RPCTransport

/// `rpcd call [--timeout S] HOST:PORT METHOD [PARAM-JSON]`: sends one request in canonical form
/// through `RPCClient`, prints the counter-request as one JSON line on stdout, and exits 0 for a
/// `…Result`, 1 for `error.error`, 2 for a usage error, a connection error or an expired timeout
/// (with one line on stderr).
enum CallCommand {
    static let usage =
        "usage: rpcd call [--timeout S] [--auth NAME:TOKEN-FILE] [--key KEY | --key auto] [--ca FILE] [--cert FILE --key-file FILE] [--insecure] ADDRESS[,ADDRESS...] METHOD [PARAM-JSON | -]"

    static let help = """
        \(usage)

        Sends one request to rpcd and prints the counter-request that answers it as one JSON line.
          ADDRESS       the daemon: HOST:PORT (127.0.0.1:7878), tls:HOST:PORT (TLS) or unix:PATH
                        (unix:/run/rpcd/rpcd.sock); a comma-separated list of members is tried in
                        order, moving on from one that cannot be reached or answers readOnly (a
                        follower), and, for a read or with --key, from one that was lost or silent
                        through its share of --timeout (each member but the last gets an even share)
          METHOD        entity.method, e.g. user.getUser
          PARAM-JSON    the param object (default {}); - reads it from stdin
          --timeout S   seconds to wait for the connection and the reply together (default \(Int(defaultTimeout));
                        \(SettingRanges.describe(seconds: SettingRanges.callTimeout, zero: nil)))
          --auth NAME:TOKEN-FILE
                        authenticate as NAME with the token in TOKEN-FILE (never on the command line,
                        where ps shows it); rpcd auth add NAME ROLE prints a token
          --key KEY     the mutation's idempotency key: the daemon applies it once, and running the same
                        call with the same key again (after a timeout, say) prints the first outcome;
                        1 to \(Request.maxKeyBytes) bytes. --key auto makes one and prints it on stderr
          --ca FILE     PEM CA certificates that verify a tls: daemon (default: the system's trust store)
          --cert FILE, --key-file FILE
                        a client certificate and its key, for a daemon with tls_client_auth
          --insecure    do not verify a tls: daemon's certificate (says so on stderr): anyone on the path
                        can read and change the traffic; for a first try with a self-signed certificate
        Exit status: 0 result, 1 error.error, 2 usage error, connection error or timeout.

        Example:
          rpcd call 127.0.0.1:7878 user.getUser '{"userId":"u1"}'
        """

    static let defaultTimeout = 30.0

    struct Invocation {
        /// The first of `addresses`.
        var address: String { addresses[0] }
        var addresses: [String]
        var method: RPCMethod
        var param: JSONValue
        var timeout: Double
        var credentials: RPCCredentials?
        var key: String?
        /// `--key auto`: the key was made here, and is printed on stderr so a retry can reuse it.
        var madeKey = false
        /// TLS settings (for a tls: address).
        var tls = RPCTLSOptions()
    }

    @Sendable static func run(_ arguments: [String]) -> Int32 {
        if arguments.contains("--help") || arguments.contains("-h") {
            print(help)
            return 0
        }
        let invocation: Invocation
        do {
            invocation = try parse(arguments, stdin: { FileHandle.standardInput.readDataToEndOfFile() })
        } catch {
            LogSink.stderr.write("rpcd call: \(error.message)\n")
            return 2
        }
        if invocation.tls.insecure {
            LogSink.stderr.write("rpcd call: --insecure: the daemon's certificate is not verified; whoever answers at \(invocation.address) gets the request\(invocation.credentials == nil ? "" : " and the token")\n")
        }
        if invocation.madeKey, let key = invocation.key {
            LogSink.stderr.write("rpcd call: key \(key) (run the same call with --key \(key) to retry it exactly once)\n")
        }
        switch blocking({ await perform(invocation) }) {
        case .success(let reply):
            var line: [UInt8] = []
            RequestCodec.encode(reply, into: &line)
            FileHandle.standardOutput.write(Data(line))
            return reply.method == .error ? 1 : 0
        case .failure(let error):
            LogSink.stderr.write("rpcd call: \(error)\n")
            return 2
        }
    }

    static func parse(_ arguments: [String], stdin: () -> Data) throws(UsageError) -> Invocation {
        var positional: [String] = []
        var timeout = defaultTimeout
        var credentials: RPCCredentials?
        var key: String?
        var madeKey = false
        var tls = RPCTLSOptions()
        var tlsFlags: [String] = []
        var rest = arguments[...]
        /// The value of option `name` given as `--name VALUE` or `--name=VALUE`; nil when `argument` is another.
        func value(_ name: String, _ argument: String, needs what: String) throws(UsageError) -> String? {
            if argument == name {
                guard let next = rest.popFirst() else { throw UsageError("\(name) needs \(what); \(usage)") }
                return next
            }
            return argument.hasPrefix(name + "=") ? String(argument.dropFirst(name.count + 1)) : nil
        }
        while let argument = rest.popFirst() {
            if argument == "--insecure" {
                tls.insecure = true
                tlsFlags.append(argument)
            } else if let text = try value("--ca", argument, needs: "a PEM file of CA certificates") {
                tls.caFile = text
                tlsFlags.append("--ca")
            } else if let text = try value("--cert", argument, needs: "a PEM certificate file") {
                tls.certificateFile = text
                tlsFlags.append("--cert")
            } else if let text = try value("--key-file", argument, needs: "the PEM key file of --cert") {
                tls.keyFile = text
                tlsFlags.append("--key-file")
            } else if let text = try value("--auth", argument, needs: "NAME:TOKEN-FILE") {
                credentials = try readCredentials(text)
            } else if let text = try value("--key", argument, needs: "a KEY, or auto") {
                guard !text.isEmpty, text.utf8.count <= Request.maxKeyBytes else {
                    throw UsageError("--key must be 1 to \(Request.maxKeyBytes) bytes (it is \(text.utf8.count)), or auto to make one")
                }
                key = text == "auto" ? RPCKeyGenerator.random().next() : text
                madeKey = text == "auto"
            } else if let text = try value("--timeout", argument, needs: "a number of seconds") {
                timeout = try CommandLineParser.checked("--timeout", text) {
                    ConfigValue.seconds($0, in: SettingRanges.callTimeout, zero: nil)
                }
            } else if argument.hasPrefix("-") && argument != "-" && positional.count < 2 {
                throw UsageError("unknown option '\(argument)' for call; \(usage)")
            } else {
                positional.append(argument)
            }
        }
        guard positional.count >= 2 else { throw UsageError("call needs HOST:PORT and METHOD; \(usage)") }
        guard positional.count <= 3 else {
            throw UsageError("too many arguments (\(positional.count)); quote the param as one argument: \(usage)")
        }
        let addresses = positional[0].split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        for address in addresses {
            let isTLS = address.hasPrefix("tls:")
            guard SocketAddress(parsing: isTLS ? String(address.dropFirst(4)) : address) != nil, !(isTLS && address.hasPrefix("tls:unix:")) else {
                throw UsageError("'\(address)' is not an address: use \(SocketAddress.acceptedForms); tls:HOST:PORT for TLS; a list as A,B")
            }
        }
        if !addresses.contains(where: { $0.hasPrefix("tls:") }), let flag = tlsFlags.first {
            throw UsageError("\(flag) is for a TLS daemon: give its address as tls:\(addresses[0])")
        }
        if (tls.certificateFile == nil) != (tls.keyFile == nil) {
            throw UsageError("--cert and --key-file go together: give the client certificate and its key")
        }
        guard let method = RPCMethod(parsing: positional[1]) else {
            throw UsageError("method '\(positional[1])' is not of the form entity.method, e.g. user.getUser")
        }
        var paramBytes = Array("{}".utf8)
        var source = "PARAM-JSON"
        if positional.count == 3 {
            if positional[2] == "-" {
                paramBytes = Array(stdin())
                source = "the param read from stdin"
            } else {
                paramBytes = Array(positional[2].utf8)
            }
        }
        let param: JSONValue
        do {
            param = try JSONParser.parse(paramBytes)
        } catch {
            throw UsageError("\(source) is not valid JSON (\(error)); give an object like '{\"userId\":\"u1\"}'")
        }
        return Invocation(
            addresses: addresses, method: method, param: param, timeout: timeout, credentials: credentials, key: key, madeKey: madeKey, tls: tls)
    }

    /// `NAME:TOKEN-FILE` -> the name and the file's token (surrounding whitespace dropped).
    static func readCredentials(_ text: String) throws(UsageError) -> RPCCredentials {
        guard let colon = text.firstIndex(of: ":"), colon != text.startIndex, text.index(after: colon) != text.endIndex else {
            throw UsageError("--auth '\(text)' is not NAME:TOKEN-FILE, e.g. --auth app:/etc/rpcd/app.token")
        }
        let name = String(text[..<colon])
        let path = String(text[text.index(after: colon)...])
        guard let data = FileManager.default.contents(atPath: path) else {
            throw UsageError("--auth: cannot read the token file \(path); give a readable file holding the token rpcd auth add printed")
        }
        let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !token.isEmpty, !token.contains(where: \.isNewline) else {
            throw UsageError("--auth: \(path) must hold one token on one line")
        }
        return .token(name: name, secret: token)
    }

    /// Tries the addresses in order within one deadline: past one that cannot be reached, that
    /// answers `readOnly` (a follower), or, when asking again is safe (a read, or a call with a
    /// key), that was lost or silent before it answered. A member that is not the last gets an even
    /// share of the time left, so one that is stopped (SIGSTOP: the kernel still accepts) cannot
    /// spend all of it; without a key a mutation keeps the rest once connected, since a member that
    /// is slow may still apply it. The last member's outcome is the command's, unless it turned the
    /// call away after an earlier one was silent: then the silent one's (unknown) is.
    static func perform(_ invocation: Invocation) async -> Result<Request, RPCClientError> {
        let deadline = ContinuousClock.now + Duration.nanoseconds(Int64(invocation.timeout * 1e9))
        let askAgain: String? =
            invocation.key != nil
            ? "the key makes the retry safe"
            : Entities.table.entry(for: invocation.method)?.isMutation == false ? "a read is safe to ask again" : nil
        var outcome: Result<Request, RPCClientError> = .failure(.connectFailed(address: invocation.address, reason: "no address"))
        // The first member that was silent: if no later one takes the call, its outcome is the
        // command's (unknown, exit 2), not a follower's readOnly, which would say nothing applied it.
        var silent: (address: String, outcome: Result<Request, RPCClientError>)?
        var tried = invocation.address
        for (index, address) in invocation.addresses.enumerated() {
            tried = address
            let left = invocation.addresses.count - index
            let share = left == 1 ? deadline : ContinuousClock.now + (deadline - ContinuousClock.now) / left
            outcome = await perform(invocation, at: address, connectBy: share, answerBy: askAgain == nil ? deadline : share)
            guard left > 1 else { break }
            let next = invocation.addresses[index + 1]
            let why: String
            switch outcome {
            case .success(let reply) where Self.isReadOnly(reply):
                why = "answered readOnly (a follower)"
            case .failure(.connectFailed(_, let reason)):
                why = "cannot be reached (\(reason))"
            case .failure(.outcomeUnknown(_, _, _, _, let reason)) where askAgain != nil:
                why = "was lost before it answered (\(reason)); \(askAgain ?? "")"
            case .failure(.timedOut) where askAgain != nil:
                silent = silent ?? (address, outcome)
                why = "did not answer in its share of --timeout (stopped or overloaded?); \(askAgain ?? "")"
            case .failure(.timedOut), .failure(.outcomeUnknown):
                LogSink.stderr.write(
                    "rpcd call: \(address) did not answer; not trying \(next): without --key this mutation may have been applied there and a retry could apply it twice; run it again with --key\n")
                return outcome
            default:
                return outcome
            }
            guard ContinuousClock.now < deadline else { break }
            LogSink.stderr.write("rpcd call: \(address) \(why); trying \(next)\n")
        }
        if let silent, let refusal = Self.refusal(outcome) {
            LogSink.stderr.write(
                "rpcd call: \(tried) \(refusal), and \(silent.address) did not answer; run the call again\(invocation.key == nil ? "" : " with the same --key") to learn its outcome\n")
            return silent.outcome
        }
        return outcome
    }

    /// How the last member turned the call away without applying it: as a follower, or unreachable.
    static func refusal(_ outcome: Result<Request, RPCClientError>) -> String? {
        switch outcome {
        case .success(let reply): return isReadOnly(reply) ? "answered readOnly (a follower)" : nil
        case .failure(.connectFailed): return "cannot be reached"
        default: return nil
        }
    }

    /// A follower's `readOnly` answer.
    static func isReadOnly(_ reply: Request) -> Bool {
        reply.method == .error && code(of: reply) == RPCErrorCode.readOnly.rawValue
    }

    /// An `error.error` reply's code.
    static func code(of reply: Request) -> String? {
        guard case .object(let param)? = reply.param, case .string(let code)? = param["code"] else { return nil }
        return code
    }

    /// Connects to `address` (TCP, TLS and `system.auth`) before `connectBy`, then calls and waits
    /// for the answer until `answerBy`.
    static func perform(
        _ invocation: Invocation, at address: String, connectBy: ContinuousClock.Instant, answerBy: ContinuousClock.Instant
    ) async -> Result<Request, RPCClientError> {
        // `parse` bounds the timeout (30 days at most), so the nanoseconds fit in Int64.
        let timeout = Duration.nanoseconds(Int64(invocation.timeout * 1e9))
        do {
            let left = max(connectBy - ContinuousClock.now, .milliseconds(1))
            let options = RPCClientOptions(
                defaultTimeout: left, connectTimeout: left, credentials: invocation.credentials,
                tls: address.hasPrefix("tls:") ? invocation.tls : nil)
            let client = try await RPCClient.connect(to: address, options: options)
            defer { client.close() }
            let remaining = max(answerBy - ContinuousClock.now, .milliseconds(1))
            return .success(try await client.send(invocation.method, param: invocation.param, key: invocation.key, timeout: remaining))
        } catch RPCClientError.timedOut(let method, let id, _) {
            return .failure(.timedOut(method: method, id: id, after: timeout))  // the whole --timeout, not what was left of it
        } catch RPCClientError.authenticationFailed(_, let message, _, let id) {
            // The daemon's own answer to system.auth, as the call's error.error (exit 1).
            let param = JSONValue.object(JSONObject([("errorMessage", .string(message)), ("code", .string(RPCErrorCode.unauthorized.rawValue))]))
            return .success(Request(id: id, method: .error, param: param))
        } catch let error as RPCClientError {
            return .failure(error)
        } catch {
            return .failure(.connectFailed(address: address, reason: "\(error)"))
        }
    }

    /// Runs `body` on the concurrency pool and blocks this (non-pool) thread until it is done.
    private static func blocking<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
        let box = ResultBox<T>()
        Task {
            box.value = await body()
            box.done.signal()
        }
        box.done.wait()
        guard let value = box.value else { preconditionFailure("task finished without a value") }
        return value
    }
}

/// Carries a task's result to the thread waiting for it.
private final class ResultBox<T>: @unchecked Sendable {
    // @unchecked: `value` is written once before `done.signal()` and read only after `done.wait()`.
    var value: T?
    let done = DispatchSemaphore(value: 0)
}
