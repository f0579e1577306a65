/*
 * icegov reference Iceberg REST catalog -- TEST-ONLY, never deploy it.
 *
 * An independent Iceberg REST catalog for the icegov test suite, so the proxy can be proven in
 * front of a catalog our team did not write. All catalog logic is Apache Iceberg's own:
 * org.apache.iceberg.rest.CatalogHandlers (the same handlers Iceberg's test REST server uses) over
 * an org.apache.iceberg.hadoop.HadoopCatalog rooted in a local directory for tables, and
 * org.apache.iceberg.inmemory.InMemoryCatalog for views (HadoopCatalog has none). This file and
 * its siblings only do HTTP plumbing with the JDK's com.sun.net.httpserver.HttpServer:
 *
 *   ReferenceCatalog            startup, READY line, shutdown when stdin closes
 *   RestRouter                  routes, (de)serialisation, exception -> HTTP status mapping
 *   NamespacePropertiesCatalog  HadoopCatalog + in-memory namespace properties + views
 *   ReferenceViews              InMemoryCatalog views, in HadoopCatalog's namespaces only
 *   IcebergRestAccess           access to Iceberg's package-private mapper / commit helper
 *
 * Usage: java -cp <classes>:<iceberg-spark-runtime.jar>:<pyspark>/jars/* \
 *          referencecatalog.ReferenceCatalog --warehouse DIR [--port 0] [--ignore-stdin]
 * Prints "READY http://127.0.0.1:PORT" on stdout once listening; logs requests on stderr.
 * Exits when its standard input reaches EOF (so a killed test run leaves no orphan), unless
 * --ignore-stdin is given.
 */
package referencecatalog;

import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;

public final class ReferenceCatalog {
  private ReferenceCatalog() {}

  public static void main(String[] args) throws Exception {
    Path warehouse = null;
    int port = 0;
    boolean watchStdin = true;
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--warehouse" -> warehouse = Paths.get(args[++i]).toAbsolutePath();
        case "--port" -> port = Integer.parseInt(args[++i]);
        case "--ignore-stdin" -> watchStdin = false;
        default -> throw new IllegalArgumentException("Unknown argument: " + args[i]);
      }
    }
    if (warehouse == null) {
      throw new IllegalArgumentException("--warehouse DIR is required");
    }
    Files.createDirectories(warehouse);

    NamespacePropertiesCatalog catalog =
        NamespacePropertiesCatalog.open("reference", warehouse.toUri().toString());

    InetAddress loopback = InetAddress.getByName("127.0.0.1");
    HttpServer server = HttpServer.create(new InetSocketAddress(loopback, port), 128);
    server.createContext("/", new RestRouter(catalog));
    ExecutorService pool = Executors.newCachedThreadPool(daemonThreads());
    server.setExecutor(pool);
    server.start();

    System.out.println("READY http://127.0.0.1:" + server.getAddress().getPort());
    System.out.flush();

    if (watchStdin) {
      drain(System.in); // blocks until the parent closes our stdin or dies
      System.err.println("reference-catalog: stdin closed, shutting down");
      server.stop(0);
      pool.shutdownNow();
      System.exit(0);
    }
  }

  private static void drain(InputStream in) {
    byte[] buffer = new byte[256];
    try {
      while (in.read(buffer) >= 0) {
        // ignore anything written to us
      }
    } catch (IOException e) {
      // treat a broken stdin like EOF
    }
  }

  private static java.util.concurrent.ThreadFactory daemonThreads() {
    AtomicInteger counter = new AtomicInteger();
    return runnable -> {
      Thread thread = new Thread(runnable, "reference-catalog-" + counter.incrementAndGet());
      thread.setDaemon(true);
      return thread;
    };
  }
}
