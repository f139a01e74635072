/// What SIGHUP re-reads while the daemon serves: the auth file and the TLS certificate and key.
///
/// Every other setting (listen, data_dir, fsync, limits, log_level) is read once at start and
/// needs a restart. Each step re-reads its source and returns one line for the log, or throws to
/// keep what it had.
struct ReloadHook: Sendable {
    struct Step: Sendable {
        var name: String
        var run: @Sendable () throws -> String
    }

    var steps: [Step] = []

    /// Runs every step in order (on the signal queue); one failing step does not stop the others.
    func reload(log: Logger) {
        guard !steps.isEmpty else {
            log.info("SIGHUP: nothing to reload; configuration changes need a restart (e.g. systemctl restart rpcd)")
            return
        }
        for step in steps {
            do {
                let outcome = try step.run()
                log.info("SIGHUP: \(step.name): \(outcome)")
            } catch {
                log.warning("SIGHUP: \(step.name) not reloaded, keeping the previous one: \(error)")
            }
        }
    }
}
