/*
 * icegov Java-compatibility harness for scan-planning responses -- TEST-ONLY.
 *
 * Parses a scan-planning response exactly as Apache Iceberg's Java REST client does: the
 * client's own shaded ObjectMapper (org.apache.iceberg.rest.RESTObjectMapper, what HTTPClient
 * uses) with a ParserContext carrying "specsById" (the table's partition specs) and
 * "caseSensitive", reading PlanTableScanResponse, FetchPlanningResultResponse or
 * FetchScanTasksResponse. Those deserializers call Iceberg's PlanTableScanResponseParser /
 * FetchPlanningResultResponseParser / FetchScanTasksResponseParser, which in turn use
 * TableScanResponseParser, RESTFileScanTaskParser and ContentFileParser. Nothing here parses
 * the response by itself: this file only feeds Iceberg and prints what Iceberg understood.
 *
 * A job is a JSON object:
 *   {"kind": "plan" | "fetch" | "tasks", "metadata": {table metadata JSON},
 *    "response": {response JSON}, "case-sensitive": true}
 *
 * Usage (classpath: these classes, the Iceberg runtime jar, pyspark's jars for Hadoop):
 *   PlanResponses                      one job on stdin; its summary on stdout (exit 0), or
 *                                      "ERROR <stage> <exception class>: <message>" on stderr
 *                                      (exit 1)
 *   PlanResponses --batch              a JSON array of jobs on stdin; a JSON array on stdout with,
 *                                      per job, {"summary": {...}} or
 *                                      {"error": {"stage", "class", "message"}} (exit 0)
 *   PlanResponses KIND METADATA.json RESPONSE.json [--case-insensitive]
 *                                      the same as the first form, from files
 * Exit code 2 means the harness itself was misused (bad arguments, malformed job).
 *
 * The stage of a failure says when Java gave up: "metadata" (TableMetadataParser rejected the
 * metadata), "parse" (the client's deserializer rejected the response: the request would fail)
 * or "use" (the response parsed, but reading what a task holds -- its residual, its files --
 * failed, as it would when the engine first touches the task).
 */
package javacompat;

import java.io.IOException;
import java.io.InputStream;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.iceberg.ContentFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.Schema;
import org.apache.iceberg.StructLike;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableMetadataParser;
import org.apache.iceberg.expressions.Expression;
import org.apache.iceberg.rest.ParserContext;
import org.apache.iceberg.rest.PlanStatus;
import org.apache.iceberg.rest.responses.BaseScanTaskResponse;
import org.apache.iceberg.rest.responses.FetchPlanningResultResponse;
import org.apache.iceberg.rest.responses.FetchScanTasksResponse;
import org.apache.iceberg.rest.responses.PlanTableScanResponse;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.JsonNode;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.iceberg.types.Conversions;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.util.JsonUtil;

public final class PlanResponses {
  private static final ObjectMapper OUT = JsonUtil.mapper();

  private PlanResponses() {}

  /** Thrown for a malformed job: the harness was misused, Iceberg was never asked. */
  static final class UsageError extends Exception {
    private static final long serialVersionUID = 1L;

    UsageError(String message) {
      super(message);
    }
  }

  /** Java gave up on a job at one stage: "metadata", "parse" or "use". */
  static final class StageFailure extends Exception {
    private static final long serialVersionUID = 1L;
    final String stage;

    StageFailure(String stage, Exception cause) {
      super(cause.getClass().getName() + ": " + cause.getMessage(), cause);
      this.stage = stage;
    }

    String javaClass() {
      return getCause().getClass().getName();
    }

    String javaMessage() {
      return String.valueOf(getCause().getMessage());
    }
  }

  public static void main(String[] args) throws IOException {
    try {
      if (args.length == 1 && args[0].equals("--batch")) {
        System.out.println(OUT.writeValueAsString(runBatch(readStdin())));
        return;
      }
      JsonNode job = args.length == 0 ? readStdin() : jobFromFiles(args);
      ObjectNode summary;
      try {
        summary = run(job);
      } catch (StageFailure e) {
        System.err.println("ERROR " + e.stage + " " + e.javaClass() + ": " + e.javaMessage());
        System.exit(1);
        return;
      }
      System.out.println(OUT.writeValueAsString(summary));
    } catch (UsageError e) {
      System.err.println("USAGE " + e.getMessage());
      System.exit(2);
    }
  }

  private static JsonNode readStdin() throws IOException, UsageError {
    InputStream in = System.in;
    String text = new String(in.readAllBytes(), StandardCharsets.UTF_8);
    return parseJson(text, "standard input");
  }

  private static JsonNode parseJson(String text, String where) throws UsageError {
    try {
      return OUT.readTree(text);
    } catch (IOException e) {
      throw new UsageError("not JSON: " + where);
    }
  }

  private static JsonNode jobFromFiles(String[] args) throws IOException, UsageError {
    if (args.length < 3 || args.length > 4) {
      throw new UsageError("PlanResponses [--batch | KIND METADATA RESPONSE [--case-insensitive]]");
    }
    ObjectNode job = OUT.createObjectNode();
    job.put("kind", args[0]);
    job.set("metadata", parseJson(Files.readString(Paths.get(args[1])), args[1]));
    job.set("response", parseJson(Files.readString(Paths.get(args[2])), args[2]));
    job.put("case-sensitive", !(args.length == 4 && args[3].equals("--case-insensitive")));
    return job;
  }

  private static ArrayNode runBatch(JsonNode jobs) throws IOException, UsageError {
    if (!jobs.isArray()) {
      throw new UsageError("--batch expects a JSON array of jobs");
    }
    ArrayNode results = OUT.createArrayNode();
    for (JsonNode job : jobs) {
      ObjectNode result = results.addObject();
      try {
        result.set("summary", run(job));
      } catch (StageFailure e) {
        ObjectNode error = result.putObject("error");
        error.put("stage", e.stage);
        error.put("class", e.javaClass());
        error.put("message", e.javaMessage());
      }
    }
    return results;
  }

  /** Parses one job's response as the Java REST client would and summarizes it. */
  static ObjectNode run(JsonNode job) throws IOException, UsageError, StageFailure {
    if (!job.isObject() || !job.has("kind") || !job.has("metadata") || !job.has("response")) {
      throw new UsageError("a job needs \"kind\", \"metadata\" and \"response\"");
    }
    String kind = job.get("kind").asText();
    Class<? extends BaseScanTaskResponse> type = responseType(kind);
    boolean caseSensitive = !job.has("case-sensitive") || job.get("case-sensitive").asBoolean();
    TableMetadata metadata;
    try {
      metadata = TableMetadataParser.fromJson(job.get("metadata"));
    } catch (RuntimeException e) {
      throw new StageFailure("metadata", e);
    }
    String body = OUT.writeValueAsString(job.get("response"));
    BaseScanTaskResponse response;
    try {
      response = clientParse(type, body, metadata, caseSensitive);
    } catch (RuntimeException | IOException e) {
      throw new StageFailure("parse", e);
    }
    try {
      return summarize(kind, response, metadata.schema());
    } catch (RuntimeException e) {
      throw new StageFailure("use", e);
    }
  }

  private static Class<? extends BaseScanTaskResponse> responseType(String kind) throws UsageError {
    switch (kind) {
      case "plan":
        return PlanTableScanResponse.class;
      case "fetch":
        return FetchPlanningResultResponse.class;
      case "tasks":
        return FetchScanTasksResponse.class;
      default:
        throw new UsageError("unknown kind (expected plan, fetch or tasks): " + kind);
    }
  }

  /** What HTTPClient does: the REST mapper's reader, with the scan's ParserContext injected. */
  private static BaseScanTaskResponse clientParse(
      Class<? extends BaseScanTaskResponse> type,
      String body,
      TableMetadata metadata,
      boolean caseSensitive)
      throws IOException {
    ParserContext context =
        ParserContext.builder()
            .add("specsById", metadata.specsById())
            .add("caseSensitive", caseSensitive)
            .build();
    return restMapper().readerFor(type).with(context.toInjectableValues()).readValue(body);
  }

  private static ObjectMapper restMapper() {
    try {
      Class<?> holder = Class.forName("org.apache.iceberg.rest.RESTObjectMapper");
      Method mapper = holder.getDeclaredMethod("mapper");
      mapper.setAccessible(true);
      return (ObjectMapper) mapper.invoke(null);
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException("cannot reach Iceberg's REST ObjectMapper", e);
    }
  }

  private static ObjectNode summarize(String kind, BaseScanTaskResponse response, Schema schema) {
    ObjectNode out = OUT.createObjectNode();
    out.put("kind", kind);
    PlanStatus status = null;
    String planId = null;
    if (response instanceof PlanTableScanResponse) {
      status = ((PlanTableScanResponse) response).planStatus();
      planId = ((PlanTableScanResponse) response).planId();
    } else if (response instanceof FetchPlanningResultResponse) {
      status = ((FetchPlanningResultResponse) response).planStatus();
    }
    out.put("status", status == null ? null : status.status());
    out.put("plan-id", planId);
    putStrings(out, "plan-tasks", response.planTasks());
    ArrayNode deletes = nullableArray(out, "delete-files", response.deleteFiles());
    if (deletes != null) {
      for (DeleteFile file : response.deleteFiles()) {
        deletes.add(fileSummary(file, schema));
      }
    }
    ArrayNode tasks = nullableArray(out, "file-scan-tasks", response.fileScanTasks());
    if (tasks != null) {
      for (FileScanTask task : response.fileScanTasks()) {
        tasks.add(taskSummary(task, schema));
      }
    }
    return out;
  }

  private static ArrayNode nullableArray(ObjectNode out, String field, List<?> values) {
    if (values == null) {
      out.putNull(field);
      return null;
    }
    return out.putArray(field);
  }

  private static void putStrings(ObjectNode out, String field, List<String> values) {
    ArrayNode array = nullableArray(out, field, values);
    if (array != null) {
      values.forEach(array::add);
    }
  }

  private static ObjectNode taskSummary(FileScanTask task, Schema schema) {
    ObjectNode out = OUT.createObjectNode();
    out.set("data-file", fileSummary(task.file(), schema));
    ArrayNode deletes = out.putArray("deletes");
    for (DeleteFile file : task.deletes()) {
      deletes.add(fileSummary(file, schema));
    }
    Expression residual = task.residual();
    out.put("residual", residual == null ? null : residual.toString());
    out.put("spec-id", task.spec().specId());
    return out;
  }

  private static ObjectNode fileSummary(ContentFile<?> file, Schema schema) {
    ObjectNode out = OUT.createObjectNode();
    out.put("path", file.location());
    out.put("content", file.content().name());
    out.put("format", file.format().name());
    out.put("spec-id", file.specId());
    out.set("partition", partitionValues(file.partition()));
    out.put("record-count", file.recordCount());
    out.put("file-size-in-bytes", file.fileSizeInBytes());
    out.set("lower-bounds", bounds(file.lowerBounds(), schema));
    out.set("upper-bounds", bounds(file.upperBounds(), schema));
    if (file instanceof DeleteFile) {
      DeleteFile delete = (DeleteFile) file;
      out.put("referenced-data-file", delete.referencedDataFile());
      out.put("content-offset", delete.contentOffset());
      out.put("content-size-in-bytes", delete.contentSizeInBytes());
    }
    List<Integer> equalityIds = file.equalityFieldIds();
    ArrayNode ids = nullableArray(out, "equality-ids", equalityIds);
    if (ids != null) {
      equalityIds.forEach(ids::add);
    }
    return out;
  }

  private static ArrayNode partitionValues(StructLike partition) {
    ArrayNode values = OUT.createArrayNode();
    if (partition == null) {
      return values;
    }
    for (int pos = 0; pos < partition.size(); pos++) {
      Object value = partition.get(pos, Object.class);
      values.add(value == null ? null : display(value));
    }
    return values;
  }

  /** Bound values by field id, decoded with the field's type in the table's current schema. */
  private static JsonNode bounds(Map<Integer, ByteBuffer> bounds, Schema schema) {
    if (bounds == null) {
      return OUT.nullNode();
    }
    ObjectNode out = OUT.createObjectNode();
    for (Map.Entry<Integer, ByteBuffer> entry : new TreeMap<>(bounds).entrySet()) {
      Type type = schema.findType(entry.getKey());
      ByteBuffer bytes = entry.getValue().duplicate();
      Object value = type == null ? bytes : Conversions.fromByteBuffer(type, bytes);
      out.put(String.valueOf(entry.getKey()), display(value));
    }
    return out;
  }

  private static String display(Object value) {
    if (value instanceof ByteBuffer) {
      ByteBuffer bytes = ((ByteBuffer) value).duplicate();
      StringBuilder hex = new StringBuilder("0x");
      while (bytes.hasRemaining()) {
        hex.append(String.format("%02X", bytes.get()));
      }
      return hex.toString();
    }
    return String.valueOf(value);
  }
}
