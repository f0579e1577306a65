/*
 * Test-only. Part of the icegov reference Iceberg REST catalog (see ReferenceCatalog.java).
 *
 * HTTP plumbing only: match "/v1/..." routes, decode path segments and query parameters, read the
 * JSON body into Iceberg's request classes, call Apache Iceberg's CatalogHandlers, and write the
 * response (or an Iceberg ErrorResponse) as JSON. No catalog decision is taken here.
 */
package referencecatalog;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import java.io.IOException;
import java.io.OutputStream;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.locks.ReadWriteLock;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.function.Supplier;
import java.util.regex.Pattern;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.exceptions.AlreadyExistsException;
import org.apache.iceberg.exceptions.BadRequestException;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.exceptions.ForbiddenException;
import org.apache.iceberg.exceptions.NamespaceNotEmptyException;
import org.apache.iceberg.exceptions.NoSuchNamespaceException;
import org.apache.iceberg.exceptions.NoSuchTableException;
import org.apache.iceberg.exceptions.NoSuchViewException;
import org.apache.iceberg.exceptions.NotAuthorizedException;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.rest.CatalogHandlers;
import org.apache.iceberg.rest.IcebergRestAccess;
import org.apache.iceberg.rest.RESTRequest;
import org.apache.iceberg.rest.RESTUtil;
import org.apache.iceberg.rest.requests.CommitTransactionRequest;
import org.apache.iceberg.rest.requests.CreateNamespaceRequest;
import org.apache.iceberg.rest.requests.CreateTableRequest;
import org.apache.iceberg.rest.requests.CreateViewRequest;
import org.apache.iceberg.rest.requests.RegisterTableRequest;
import org.apache.iceberg.rest.requests.RenameTableRequest;
import org.apache.iceberg.rest.requests.ReportMetricsRequest;
import org.apache.iceberg.rest.requests.UpdateNamespacePropertiesRequest;
import org.apache.iceberg.rest.requests.UpdateTableRequest;
import org.apache.iceberg.rest.responses.ConfigResponse;
import org.apache.iceberg.rest.responses.ErrorResponse;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;

final class RestRouter implements HttpHandler {
  private static final ObjectMapper MAPPER = IcebergRestAccess.mapper();
  private static final Pattern ENCODED_UNIT_SEPARATOR =
      Pattern.compile("%1F", Pattern.CASE_INSENSITIVE);

  /** What a route answers: a status and a response object (null means no body). */
  record Reply(int status, Object body) {
    static Reply ok(Object body) {
      return new Reply(200, body);
    }

    static Reply noContent() {
      return new Reply(204, null);
    }
  }

  /** One decoded request, as seen by a route. */
  private record Call(Map<String, String> vars, Map<String, String> query, byte[] body) {
    Namespace namespace() {
      String[] levels = ENCODED_UNIT_SEPARATOR.split(vars.get("namespace"), -1);
      for (int i = 0; i < levels.length; i++) {
        levels[i] = RESTUtil.decodeString(levels[i]);
      }
      return Namespace.of(levels);
    }

    TableIdentifier table() {
      return TableIdentifier.of(namespace(), RESTUtil.decodeString(vars.get("table")));
    }

    TableIdentifier view() {
      return TableIdentifier.of(namespace(), RESTUtil.decodeString(vars.get("view")));
    }

    <T extends RESTRequest> T json(Class<T> type) {
      T request;
      try {
        request = MAPPER.readValue(body, type);
      } catch (IOException | RuntimeException e) {
        throw new BadRequestException("Malformed %s: %s", type.getSimpleName(), e.getMessage());
      }
      if (request == null) {
        throw new BadRequestException("Missing request body, expected %s", type.getSimpleName());
      }
      request.validate();
      return request;
    }
  }

  private interface Action {
    Reply run(Call call) throws Exception;
  }

  private record Route(String method, String[] pattern, Action action) {
    Map<String, String> match(String requestMethod, String[] segments) {
      if (!method.equals(requestMethod) || pattern.length != segments.length) {
        return null;
      }
      Map<String, String> vars = new HashMap<>();
      for (int i = 0; i < pattern.length; i++) {
        if (pattern[i].startsWith("{")) {
          vars.put(pattern[i].substring(1, pattern[i].length() - 1), segments[i]);
        } else if (!pattern[i].equals(segments[i])) {
          return null;
        }
      }
      return vars;
    }
  }

  private final NamespacePropertiesCatalog catalog;
  /**
   * Single-table writes share this lock; a multi-table transaction takes it exclusively so that
   * nothing commits between its validation and its commit. Conflicts between single-table commits
   * are detected by Iceberg itself (requirements + HadoopTableOperations' optimistic commit).
   */
  private final ReadWriteLock commitLock = new ReentrantReadWriteLock();

  private final List<Route> routes;

  RestRouter(NamespacePropertiesCatalog catalog) {
    this.catalog = catalog;
    this.routes =
        List.of(
            route("GET", "config", c -> Reply.ok(config())),
            route("GET", "namespaces", this::listNamespaces),
            route("POST", "namespaces", this::createNamespace),
            route("HEAD", "namespaces/{namespace}", this::namespaceExists),
            route("GET", "namespaces/{namespace}", this::loadNamespace),
            route("DELETE", "namespaces/{namespace}", this::dropNamespace),
            route("POST", "namespaces/{namespace}/properties", this::updateNamespaceProperties),
            route("GET", "namespaces/{namespace}/tables", this::listTables),
            route("POST", "namespaces/{namespace}/tables", this::createTable),
            route("POST", "namespaces/{namespace}/register", this::registerTable),
            route("HEAD", "namespaces/{namespace}/tables/{table}", this::tableExists),
            route("GET", "namespaces/{namespace}/tables/{table}", this::loadTable),
            route("POST", "namespaces/{namespace}/tables/{table}", this::updateTable),
            route("DELETE", "namespaces/{namespace}/tables/{table}", this::dropTable),
            route("POST", "namespaces/{namespace}/tables/{table}/metrics", this::reportMetrics),
            route("POST", "tables/rename", this::renameTable),
            route("POST", "transactions/commit", this::commitTransaction),
            route("GET", "namespaces/{namespace}/views", this::listViews),
            route("POST", "namespaces/{namespace}/views", this::createView),
            route("HEAD", "namespaces/{namespace}/views/{view}", this::viewExists),
            route("GET", "namespaces/{namespace}/views/{view}", this::loadView),
            route("POST", "namespaces/{namespace}/views/{view}", this::replaceView),
            route("DELETE", "namespaces/{namespace}/views/{view}", this::dropView),
            route("POST", "views/rename", this::renameView));
  }

  /** The config, advertising exactly the endpoints this server routes (config itself aside). */
  private ConfigResponse config() {
    List<org.apache.iceberg.rest.Endpoint> endpoints = new java.util.ArrayList<>();
    for (Route r : routes) {
      String path = String.join("/", r.pattern()).substring("v1/".length());
      if (!path.equals("config")) {
        endpoints.add(org.apache.iceberg.rest.Endpoint.create(r.method(), "/v1/{prefix}/" + path));
      }
    }
    return ConfigResponse.builder().withEndpoints(endpoints).build();
  }

  private static Route route(String method, String pattern, Action action) {
    return new Route(method, ("v1/" + pattern).split("/"), action);
  }

  // ---------------------------------------------------------------- namespaces

  private Reply listNamespaces(Call c) {
    String parent = c.query().get("parent");
    Namespace ns =
        parent == null || parent.isEmpty()
            ? Namespace.empty()
            : Namespace.of(parent.split("\u001f", -1));
    String pageSize = c.query().get("pageSize");
    return Reply.ok(
        pageSize == null
            ? CatalogHandlers.listNamespaces(catalog, ns)
            : CatalogHandlers.listNamespaces(catalog, ns, c.query().get("pageToken"), pageSize));
  }

  private Reply createNamespace(Call c) {
    return Reply.ok(
        CatalogHandlers.createNamespace(catalog, c.json(CreateNamespaceRequest.class)));
  }

  private Reply namespaceExists(Call c) {
    CatalogHandlers.namespaceExists(catalog, c.namespace());
    return Reply.noContent();
  }

  private Reply loadNamespace(Call c) {
    return Reply.ok(CatalogHandlers.loadNamespace(catalog, c.namespace()));
  }

  private Reply dropNamespace(Call c) {
    CatalogHandlers.dropNamespace(catalog, c.namespace());
    return Reply.noContent();
  }

  private Reply updateNamespaceProperties(Call c) {
    return Reply.ok(
        CatalogHandlers.updateNamespaceProperties(
            catalog, c.namespace(), c.json(UpdateNamespacePropertiesRequest.class)));
  }

  // -------------------------------------------------------------------- tables

  private Reply listTables(Call c) {
    String pageSize = c.query().get("pageSize");
    return Reply.ok(
        pageSize == null
            ? CatalogHandlers.listTables(catalog, c.namespace())
            : CatalogHandlers.listTables(
                catalog, c.namespace(), c.query().get("pageToken"), pageSize));
  }

  private Reply createTable(Call c) {
    CreateTableRequest request = c.json(CreateTableRequest.class);
    if (request.stageCreate()) {
      // Nothing is written: the client commits later with an assert-create requirement.
      return Reply.ok(CatalogHandlers.stageTableCreate(catalog, c.namespace(), request));
    }
    return write(() -> Reply.ok(CatalogHandlers.createTable(catalog, c.namespace(), request)));
  }

  private Reply registerTable(Call c) {
    RegisterTableRequest request = c.json(RegisterTableRequest.class);
    return write(() -> Reply.ok(CatalogHandlers.registerTable(catalog, c.namespace(), request)));
  }

  private Reply tableExists(Call c) {
    CatalogHandlers.tableExists(catalog, c.table());
    return Reply.noContent();
  }

  private Reply loadTable(Call c) {
    return Reply.ok(CatalogHandlers.loadTable(catalog, c.table()));
  }

  private Reply updateTable(Call c) {
    UpdateTableRequest request = c.json(UpdateTableRequest.class);
    return write(() -> Reply.ok(CatalogHandlers.updateTable(catalog, c.table(), request)));
  }

  private Reply dropTable(Call c) {
    boolean purge = Boolean.parseBoolean(c.query().get("purgeRequested"));
    return write(
        () -> {
          if (purge) {
            CatalogHandlers.purgeTable(catalog, c.table());
          } else {
            CatalogHandlers.dropTable(catalog, c.table());
          }
          return Reply.noContent();
        });
  }

  private Reply reportMetrics(Call c) {
    c.json(ReportMetricsRequest.class); // parsed to check its shape, then dropped
    return Reply.noContent();
  }

  private Reply renameTable(Call c) {
    RenameTableRequest request = c.json(RenameTableRequest.class);
    return write(
        () -> {
          CatalogHandlers.renameTable(catalog, request);
          return Reply.noContent();
        });
  }

  private Reply commitTransaction(Call c) {
    CommitTransactionRequest request = c.json(CommitTransactionRequest.class);
    commitLock.writeLock().lock();
    try {
      IcebergRestAccess.commitTransaction(catalog, request);
      return Reply.noContent();
    } finally {
      commitLock.writeLock().unlock();
    }
  }

  // --------------------------------------------------------------------- views

  private Reply listViews(Call c) {
    String pageSize = c.query().get("pageSize");
    return Reply.ok(
        pageSize == null
            ? CatalogHandlers.listViews(catalog, c.namespace())
            : CatalogHandlers.listViews(
                catalog, c.namespace(), c.query().get("pageToken"), pageSize));
  }

  private Reply createView(Call c) {
    CreateViewRequest request = c.json(CreateViewRequest.class);
    return write(() -> Reply.ok(CatalogHandlers.createView(catalog, c.namespace(), request)));
  }

  private Reply viewExists(Call c) {
    CatalogHandlers.viewExists(catalog, c.view());
    return Reply.noContent();
  }

  private Reply loadView(Call c) {
    return Reply.ok(CatalogHandlers.loadView(catalog, c.view()));
  }

  private Reply replaceView(Call c) {
    UpdateTableRequest request = c.json(UpdateTableRequest.class);
    return write(() -> Reply.ok(CatalogHandlers.updateView(catalog, c.view(), request)));
  }

  private Reply dropView(Call c) {
    return write(
        () -> {
          CatalogHandlers.dropView(catalog, c.view());
          return Reply.noContent();
        });
  }

  private Reply renameView(Call c) {
    RenameTableRequest request = c.json(RenameTableRequest.class);
    return write(
        () -> {
          CatalogHandlers.renameView(catalog, request);
          return Reply.noContent();
        });
  }

  private Reply write(Supplier<Reply> body) {
    commitLock.readLock().lock();
    try {
      return body.get();
    } finally {
      commitLock.readLock().unlock();
    }
  }

  // ---------------------------------------------------------------------- HTTP

  @Override
  public void handle(HttpExchange exchange) {
    long start = System.nanoTime();
    String method = exchange.getRequestMethod();
    String rawPath = exchange.getRequestURI().getRawPath();
    Reply reply;
    try {
      byte[] body = exchange.getRequestBody().readAllBytes();
      reply = dispatch(method, rawPath, exchange.getRequestURI().getRawQuery(), body);
    } catch (Throwable e) {
      reply = errorReply(e);
    }
    try {
      send(exchange, method, reply);
    } catch (IOException | RuntimeException e) {
      System.err.println("reference-catalog: failed to send response: " + e);
    } finally {
      exchange.close();
    }
    long millis = (System.nanoTime() - start) / 1_000_000;
    System.err.printf(
        "reference-catalog: %s %s -> %d (%d ms)%n", method, rawPath, reply.status(), millis);
  }

  private Reply dispatch(String method, String rawPath, String rawQuery, byte[] body)
      throws Exception {
    String path = rawPath.startsWith("/") ? rawPath.substring(1) : rawPath;
    if (path.endsWith("/")) {
      path = path.substring(0, path.length() - 1);
    }
    String[] segments = path.split("/", -1);
    for (Route route : routes) {
      Map<String, String> vars = route.match(method, segments);
      if (vars != null) {
        return route.action().run(new Call(vars, parseQuery(rawQuery), body));
      }
    }
    return error(404, "NotFoundException", "No route for " + method + " " + rawPath);
  }

  private static Map<String, String> parseQuery(String rawQuery) {
    Map<String, String> query = new HashMap<>();
    if (rawQuery == null || rawQuery.isEmpty()) {
      return query;
    }
    for (String pair : rawQuery.split("&")) {
      if (pair.isEmpty()) {
        continue;
      }
      int eq = pair.indexOf('=');
      String key = eq < 0 ? pair : pair.substring(0, eq);
      String value = eq < 0 ? "" : pair.substring(eq + 1);
      query.put(
          URLDecoder.decode(key, StandardCharsets.UTF_8),
          URLDecoder.decode(value, StandardCharsets.UTF_8));
    }
    return query;
  }

  private static void send(HttpExchange exchange, String method, Reply reply) throws IOException {
    if (reply.body() == null || "HEAD".equals(method)) {
      exchange.sendResponseHeaders(reply.status(), -1);
      return;
    }
    byte[] bytes = MAPPER.writeValueAsBytes(reply.body());
    exchange.getResponseHeaders().set("Content-Type", "application/json");
    exchange.sendResponseHeaders(reply.status(), bytes.length);
    try (OutputStream out = exchange.getResponseBody()) {
      out.write(bytes);
    }
  }

  // -------------------------------------------------------------------- errors

  /** Iceberg exception -> HTTP status, following the REST spec's error responses. */
  private static int statusFor(Throwable e) {
    if (e instanceof NoSuchNamespaceException
        || e instanceof NoSuchTableException
        || e instanceof NoSuchViewException) {
      return 404;
    }
    if (e instanceof AlreadyExistsException
        || e instanceof NamespaceNotEmptyException
        || e instanceof CommitFailedException) {
      return 409;
    }
    if (e instanceof BadRequestException
        || e instanceof ValidationException
        || e instanceof IllegalArgumentException) {
      return 400;
    }
    if (e instanceof NotAuthorizedException) {
      return 401;
    }
    if (e instanceof ForbiddenException) {
      return 403;
    }
    if (e instanceof UnsupportedOperationException) {
      return 406;
    }
    return 500;
  }

  private static Reply errorReply(Throwable e) {
    int status = statusFor(e);
    if (status == 500) {
      System.err.println("reference-catalog: internal error");
      e.printStackTrace();
    }
    String type = e.getClass().getSimpleName();
    return error(status, type, e.getMessage() == null ? type : e.getMessage());
  }

  private static Reply error(int status, String type, String message) {
    return new Reply(
        status,
        ErrorResponse.builder().responseCode(status).withType(type).withMessage(message).build());
  }
}
