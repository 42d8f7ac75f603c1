// A transformation chain on JSON records, as a sink connector's worker applies it, on the transformations' own
// code (Kafka's, Debezium's, the Iceberg sink's): each line of stdin is a job, {"config": {connector keys},
// "schemas": whether values are in JsonConverter's schema envelope, "records": [{"topic", "partition",
// "offset", "timestamp", "key", "value", "headers": [[name, text]]}]}, where key and value are JSON texts (or
// null) read by Kafka's JsonConverter (keys schemaless; values with schemas.enable as the job says) and headers
// by its SimpleHeaderConverter. The stages are
// built as ConnectorConfig.transformationStages builds them and applied as TransformationStage applies them.
// Each job gets one line: {"config_error": why} or {"results": [...]}, a record's result being {"dropped": true},
// {"failed": exception} or the record, its values tagged with their Java types (see tagged()), a Struct as a map
// of its fields; with "schemas", also the value as JsonConverter writes it in its envelope ("staged": its schema
// and payload, or "staged_error" when JsonConverter cannot write it).
//
// Run on connect-transforms and connect-json (var/jars/connect-plugins): java -cp 'jars/*' ApplyTransforms.java

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Date;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.utils.Utils;
import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.header.ConnectHeaders;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.storage.SimpleHeaderConverter;
import org.apache.kafka.connect.transforms.Transformation;
import org.apache.kafka.connect.transforms.predicates.Predicate;

public class ApplyTransforms {
    static final JsonNodeFactory NODES = JsonNodeFactory.instance;

    record Stage(Transformation<SinkRecord> transformation, Predicate<SinkRecord> predicate, boolean negate) {
        SinkRecord apply(SinkRecord record) {
            if (predicate == null || negate ^ predicate.test(record)) {
                return transformation.apply(record);
            }
            return record;
        }
    }

    static Map<String, Object> withPrefix(Map<String, String> config, String prefix) {
        Map<String, Object> found = new HashMap<>();
        for (Map.Entry<String, String> entry : config.entrySet()) {
            if (entry.getKey().startsWith(prefix)) {
                found.put(entry.getKey().substring(prefix.length()), entry.getValue());
            }
        }
        return found;
    }

    @SuppressWarnings("unchecked")
    static List<Stage> stages(Map<String, String> config) throws Exception {
        List<Stage> stages = new ArrayList<>();
        String aliases = config.getOrDefault("transforms", "").trim();
        if (aliases.isEmpty()) {
            return stages;
        }
        for (String raw : aliases.split(",")) {
            String alias = raw.trim();
            String prefix = "transforms." + alias + ".";
            Class<?> type = Class.forName(config.get(prefix + "type").trim());
            Transformation<SinkRecord> transformation = (Transformation<SinkRecord>) Utils.newInstance(type);
            Map<String, Object> configs = withPrefix(config, prefix);
            Object predicateAlias = configs.remove("predicate");
            Object negate = configs.remove("negate");
            transformation.configure(configs);
            Predicate<SinkRecord> predicate = null;
            if (predicateAlias != null) {
                String predicatePrefix = "predicates." + predicateAlias + ".";
                predicate = (Predicate<SinkRecord>) Utils.newInstance(
                    Class.forName(config.get(predicatePrefix + "type").trim()));
                predicate.configure(withPrefix(config, predicatePrefix));
            }
            stages.add(new Stage(transformation, predicate, negate != null && Boolean.parseBoolean(negate.toString())));
        }
        return stages;
    }

    // A Java value as JSON that keeps its type: integers as ["i", n], a Double as ["d", raw bits], a Float as
    // ["f", Float.toString],
    // BigDecimal ["n", text], byte[] ["b", base64], java.util.Date ["t", epoch ms]; strings, booleans and null
    // as themselves, a List an array, a Map an object.
    static JsonNode tagged(Object value) {
        if (value == null) {
            return NODES.nullNode();
        } else if (value instanceof String text) {
            return NODES.textNode(text);
        } else if (value instanceof Boolean flag) {
            return NODES.booleanNode(flag);
        } else if (value instanceof Byte || value instanceof Short || value instanceof Integer || value instanceof Long) {
            return NODES.arrayNode().add("i").add(((Number) value).longValue());
        } else if (value instanceof Float single) {
            return NODES.arrayNode().add("f").add(single.toString());
        } else if (value instanceof Double) {
            return NODES.arrayNode().add("d").add(Double.doubleToRawLongBits(((Number) value).doubleValue()));
        } else if (value instanceof BigDecimal decimal) {
            return NODES.arrayNode().add("n").add(decimal.toString());
        } else if (value instanceof byte[] bytes) {
            return NODES.arrayNode().add("b").add(Base64.getEncoder().encodeToString(bytes));
        } else if (value instanceof Date date) {
            return NODES.arrayNode().add("t").add(date.getTime());
        } else if (value instanceof List<?> list) {
            ArrayNode items = NODES.arrayNode();
            for (Object item : list) {
                items.add(tagged(item));
            }
            return items;
        } else if (value instanceof Map<?, ?> map) {
            ObjectNode fields = NODES.objectNode();
            for (Map.Entry<?, ?> entry : map.entrySet()) {
                fields.set(String.valueOf(entry.getKey()), tagged(entry.getValue()));
            }
            return fields;
        } else if (value instanceof Struct struct) {
            ObjectNode fields = NODES.objectNode();
            for (Field field : struct.schema().fields()) {
                fields.set(field.name(), tagged(struct.get(field)));
            }
            return fields;
        }
        throw new IllegalStateException("no tag for " + value.getClass().getName());
    }

    public static void main(String[] args) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        JsonConverter keys = new JsonConverter();
        keys.configure(Map.of("schemas.enable", "false"), true);
        JsonConverter schemaless = new JsonConverter();
        schemaless.configure(Map.of("schemas.enable", "false"), false);
        JsonConverter enveloped = new JsonConverter();
        enveloped.configure(Map.of("schemas.enable", "true"), false);
        SimpleHeaderConverter headerConverter = new SimpleHeaderConverter();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            JsonNode job = mapper.readTree(line);
            Map<String, String> config = new HashMap<>();
            for (Iterator<Map.Entry<String, JsonNode>> it = job.get("config").fields(); it.hasNext(); ) {
                Map.Entry<String, JsonNode> entry = it.next();
                config.put(entry.getKey(), entry.getValue().asText());
            }
            ObjectNode result = NODES.objectNode();
            List<Stage> stages;
            try {
                stages = stages(config);
            } catch (Exception | LinkageError e) {
                result.put("config_error", e.toString());
                out.println(result);
                continue;
            }
            ArrayNode results = result.putArray("results");
            JsonConverter values = job.path("schemas").asBoolean(false) ? enveloped : schemaless;
            for (JsonNode given : job.get("records")) {
                String topic = given.get("topic").asText();
                ObjectNode found = NODES.objectNode();
                try {
                    Object key = given.get("key").isNull()
                        ? null : keys.toConnectData(topic, given.get("key").asText().getBytes(StandardCharsets.UTF_8)).value();
                    SchemaAndValue value = given.get("value").isNull()
                        ? SchemaAndValue.NULL : values.toConnectData(topic, given.get("value").asText().getBytes(StandardCharsets.UTF_8));
                    ConnectHeaders headers = new ConnectHeaders();
                    for (JsonNode header : given.get("headers")) {
                        String name = header.get(0).asText();
                        byte[] bytes = header.get(1).isNull() ? null : header.get(1).asText().getBytes(StandardCharsets.UTF_8);
                        headers.add(name, headerConverter.toConnectHeader(topic, name, bytes));
                    }
                    Long timestamp = given.get("timestamp").isNull() ? null : given.get("timestamp").asLong();
                    SinkRecord record = new SinkRecord(topic, given.get("partition").asInt(), null, key, value.schema(), value.value(),
                        given.get("offset").asLong(), timestamp, TimestampType.CREATE_TIME, headers);
                    for (Stage stage : stages) {
                        record = stage.apply(record);
                        if (record == null) {
                            break;
                        }
                    }
                    if (record == null) {
                        found.put("dropped", true);
                    } else {
                        found.put("topic", record.topic());
                        found.put("partition", record.kafkaPartition());
                        found.set("timestamp", record.timestamp() == null ? NODES.nullNode() : NODES.numberNode(record.timestamp()));
                        found.set("key", tagged(record.key()));
                        found.set("value", tagged(record.value()));
                        if (job.path("schemas").asBoolean(false)) {
                            // The value as JsonConverter writes it in its envelope: what a sink is handed of it.
                            try {
                                byte[] staged = enveloped.fromConnectData(record.topic(), record.valueSchema(), record.value());
                                found.set("staged", staged == null ? NODES.nullNode() : mapper.readTree(staged));
                            } catch (Exception e) {
                                found.put("staged_error", e.toString());
                            }
                        }
                        ArrayNode headerList = found.putArray("headers");
                        for (Header header : record.headers()) {
                            byte[] bytes = headerConverter.fromConnectHeader(topic, header.key(), header.schema(), header.value());
                            headerList.add(NODES.arrayNode().add(header.key())
                                .add(bytes == null ? null : new String(bytes, StandardCharsets.UTF_8)));
                        }
                    }
                } catch (Exception e) {
                    found = NODES.objectNode();
                    found.put("failed", e.toString());
                }
                results.add(found);
            }
            for (Stage stage : stages) {
                stage.transformation().close();
                if (stage.predicate() != null) {
                    stage.predicate().close();
                }
            }
            out.println(result);
        }
        out.flush();
    }
}
