// The Iceberg sink's conversion of a record to a table's row (iceberg-kafka-connect's RecordConverter), on
// schemaless JSON records as its worker reads them (Kafka's JsonConverter, schemas.enable=false): each line of
// stdin is a job, {"schema": an Iceberg schema as JSON (SchemaParser's), "records": [JSON text]}, and gets one
// line, {"rows": [...]}, a record's row being {"failed": the exception} or {"row": its fields}, each value
// tagged with its Java type (see tagged()). A row Iceberg's Parquet writer would refuse fails (writable()).
//
// Run on var/jars/connect-plugins: java -cp 'jars/*' ConvertRecords.java

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Constructor;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.time.temporal.ChronoUnit;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.iceberg.Schema;
import org.apache.iceberg.SchemaParser;
import org.apache.iceberg.Table;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.connect.IcebergSinkConfig;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.inmemory.InMemoryCatalog;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.Types;
import org.apache.kafka.connect.json.JsonConverter;

public class ConvertRecords {
    static final JsonNodeFactory NODES = JsonNodeFactory.instance;
    static final OffsetDateTime EPOCH = OffsetDateTime.of(1970, 1, 1, 0, 0, 0, 0, ZoneOffset.UTC);

    // A converted value as JSON that keeps its type: ["i", n] an int or long, ["f", Float.toString] a float,
    // ["d", raw bits] a double, ["n", text] a decimal, ["date", ISO], ["time", micros of the day],
    // ["ts", micros since the epoch] a timestamp without zone and ["tstz", micros] one with, ["uuid", text],
    // ["b", base64] bytes, ["map", [[key, value]]] a map; strings, booleans and null as themselves, a list an
    // array, a struct an object.
    static JsonNode tagged(Object value) {
        if (value == null) {
            return NODES.nullNode();
        } else if (value instanceof String text) {
            return NODES.textNode(text);
        } else if (value instanceof Boolean flag) {
            return NODES.booleanNode(flag);
        } else if (value instanceof Integer || value instanceof Long) {
            return NODES.arrayNode().add("i").add(((Number) value).longValue());
        } else if (value instanceof Float single) {
            return NODES.arrayNode().add("f").add(single.toString());
        } else if (value instanceof Double real) {
            return NODES.arrayNode().add("d").add(Double.doubleToRawLongBits(real));
        } else if (value instanceof BigDecimal decimal) {
            return NODES.arrayNode().add("n").add(decimal.toPlainString());
        } else if (value instanceof LocalDate day) {
            return NODES.arrayNode().add("date").add(day.toString());
        } else if (value instanceof LocalTime time) {
            return NODES.arrayNode().add("time").add(time.toNanoOfDay() / 1000);
        } else if (value instanceof LocalDateTime moment) {
            return NODES.arrayNode().add("ts").add(ChronoUnit.MICROS.between(EPOCH, moment.atOffset(ZoneOffset.UTC)));
        } else if (value instanceof OffsetDateTime moment) {
            return NODES.arrayNode().add("tstz").add(ChronoUnit.MICROS.between(EPOCH, moment));
        } else if (value instanceof UUID uuid) {
            return NODES.arrayNode().add("uuid").add(uuid.toString());
        } else if (value instanceof ByteBuffer buffer) {
            byte[] bytes = new byte[buffer.remaining()];
            buffer.duplicate().get(bytes);
            return NODES.arrayNode().add("b").add(Base64.getEncoder().encodeToString(bytes));
        } else if (value instanceof byte[] bytes) {
            return NODES.arrayNode().add("b").add(Base64.getEncoder().encodeToString(bytes));
        } else if (value instanceof Record record) {
            ObjectNode fields = NODES.objectNode();
            for (Types.NestedField field : record.struct().fields()) {
                fields.set(field.name(), tagged(record.getField(field.name())));
            }
            return fields;
        } else if (value instanceof List<?> list) {
            ArrayNode items = NODES.arrayNode();
            for (Object item : list) {
                items.add(tagged(item));
            }
            return items;
        } else if (value instanceof Map<?, ?> map) {
            ArrayNode entries = NODES.arrayNode();
            for (Map.Entry<?, ?> entry : map.entrySet()) {
                entries.add(NODES.arrayNode().add(tagged(entry.getKey())).add(tagged(entry.getValue())));
            }
            return NODES.arrayNode().add("map").add(entries);
        }
        throw new IllegalStateException("no tag for " + value.getClass().getName());
    }

    // What Iceberg's Parquet writer refuses of a converted row, which the converter passes: a decimal of more
    // digits than its precision, a fixed of another length (the sink's write fails then, not the record).
    static void writable(Object value, Type type) {
        if (value == null) {
            return;
        }
        switch (type.typeId()) {
            case DECIMAL -> {
                BigDecimal decimal = (BigDecimal) value;
                Types.DecimalType decimalType = (Types.DecimalType) type;
                if (decimal.precision() > decimalType.precision() || decimal.scale() != decimalType.scale()) {
                    throw new IllegalArgumentException("Cannot write " + decimal + " as " + type);
                }
            }
            case FIXED -> {
                int length = value instanceof ByteBuffer buffer ? buffer.remaining() : ((byte[]) value).length;
                if (length != ((Types.FixedType) type).length()) {
                    throw new IllegalArgumentException("Cannot write " + length + " bytes as " + type);
                }
            }
            case STRUCT -> {
                for (Types.NestedField field : type.asStructType().fields()) {
                    writable(((Record) value).getField(field.name()), field.type());
                }
            }
            case LIST -> {
                for (Object item : (List<?>) value) {
                    writable(item, type.asListType().elementType());
                }
            }
            case MAP -> {
                for (Map.Entry<?, ?> entry : ((Map<?, ?>) value).entrySet()) {
                    writable(entry.getValue(), type.asMapType().valueType());
                }
            }
            default -> { }
        }
    }

    public static void main(String[] args) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        JsonConverter values = new JsonConverter();
        values.configure(Map.of("schemas.enable", "false"), false);
        InMemoryCatalog catalog = new InMemoryCatalog();
        catalog.initialize("oracle", Map.of());
        catalog.createNamespace(Namespace.of("db"));
        IcebergSinkConfig config = new IcebergSinkConfig(Map.of(
            "iceberg.catalog.catalog-impl", InMemoryCatalog.class.getName(), "iceberg.tables", "db.t"));
        // (RecordConverter is the sink's own, package-private: reached by reflection.)
        Class<?> converterClass = Class.forName("org.apache.iceberg.connect.data.RecordConverter");
        Constructor<?> create = converterClass.getDeclaredConstructor(Table.class, IcebergSinkConfig.class);
        create.setAccessible(true);
        Method convert = converterClass.getDeclaredMethod("convert", Object.class);
        convert.setAccessible(true);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        int tables = 0;
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            JsonNode job = mapper.readTree(line);
            Schema schema = SchemaParser.fromJson(job.get("schema").toString());
            Table table = catalog.createTable(TableIdentifier.of("db", "t" + tables++), schema);
            Object converter = create.newInstance(table, config);
            ObjectNode result = NODES.objectNode();
            ArrayNode rows = result.putArray("rows");
            for (JsonNode text : job.get("records")) {
                ObjectNode found = NODES.objectNode();
                try {
                    Object value = values.toConnectData("t", text.asText().getBytes(StandardCharsets.UTF_8)).value();
                    Record row = (Record) convert.invoke(converter, value);
                    writable(row, table.schema().asStruct());
                    found.set("row", tagged(row));
                } catch (InvocationTargetException e) {
                    found.put("failed", e.getCause().toString());
                } catch (Exception e) {
                    found.put("failed", e.toString());
                }
                rows.add(found);
            }
            out.println(result);
        }
        out.flush();
    }
}
