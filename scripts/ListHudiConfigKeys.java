// Writes sinks/hudi/config_keys.py: every config key Hudi's Spark bundle declares (its ConfigProperty fields,
// with their alternative names), and the type Hudi parses its value as. Run with the bundle and pyspark's jars:
//
//   java -cp "var/jars/spark/hudi-spark3.5-bundle_2.12-1.2.0.jar:.venv/lib/python3.12/site-packages/pyspark/jars/*" \
//     scripts/ListHudiConfigKeys.java var/jars/spark/hudi-spark3.5-bundle_2.12-1.2.0.jar > sinks/hudi/config_keys.py
//
// (The bundle is fetched by `make` into var/jars/spark/, from Maven Central's org.apache.hudi:hudi-spark3.5-bundle_2.12.)

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.lang.reflect.ParameterizedType;
import java.lang.reflect.Type;
import java.util.Enumeration;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;

public class ListHudiConfigKeys {
  // The types Hudi parses values as, by the name config_keys.py gives them: Boolean.parseBoolean (any text but
  // true is false), Integer.parseInt, Long.parseLong, Double.parseDouble or Float.parseFloat; "" for a text.
  static final String TEXT = "";
  static final String BOOLEAN = "boolean";
  static final String INTEGER = "integer";
  static final String LONG = "long";
  static final String NUMBER = "number";

  /** The type of a value of Java class ``className`` (a ConfigProperty's type argument, or its default's class). */
  static String typeOf(String className) {
    switch (className) {
      case "java.lang.Boolean":
        return BOOLEAN;
      case "java.lang.Integer":
        return INTEGER;
      case "java.lang.Long":
        return LONG;
      case "java.lang.Double":
      case "java.lang.Float":
        return NUMBER;
      default:
        return TEXT;
    }
  }

  /**
   * The type of a text property by its default: Hudi reads a text whose default is a boolean with
   * Boolean.parseBoolean, and one whose default is a number with its getters of numbers (many of its older
   * properties are texts so: hoodie.compact.inline.max.delta.commits, hoodie.parquet.max.file.size). Which of
   * getInt and getLong reads a whole number is not told by its default: it is listed as a long, which refuses
   * what neither parses.
   */
  static String textOf(String fallback) {
    if (fallback.equals("true") || fallback.equals("false")) {
      return BOOLEAN;
    }
    try {
      Long.parseLong(fallback);
      return LONG;
    } catch (NumberFormatException notWhole) {
      // (a decimal, or not a number)
    }
    try {
      Double.parseDouble(fallback);
      return fallback.matches("[-+]?[0-9]*\\.?[0-9]+([eE][-+]?[0-9]+)?") ? NUMBER : TEXT;
    } catch (NumberFormatException notNumber) {
      return TEXT;
    }
  }

  /**
   * One type for a key that two properties declare (a key and another's alternative name): a typed declaration
   * wins over a text one, as the boolean did before numbers were listed; of two numeric ones, the one that
   * parses more (a long holds every integer, a number every long); a boolean and a number agree on no value,
   * so the key is listed as a text, checked by neither.
   */
  static String merge(String one, String other) {
    if (one.equals(other) || other.equals(TEXT)) {
      return one;
    }
    if (one.equals(TEXT)) {
      return other;
    }
    if (one.equals(BOOLEAN) || other.equals(BOOLEAN)) {
      System.err.println("a key declared both a boolean and a number: " + one + ", " + other);
      return TEXT;
    }
    return one.equals(NUMBER) || other.equals(NUMBER) ? NUMBER : LONG;
  }

  public static void main(String[] args) throws Exception {
    ClassLoader loader = ListHudiConfigKeys.class.getClassLoader();
    Class<?> property = Class.forName("org.apache.hudi.common.config.ConfigProperty", false, loader);
    Method key = property.getMethod("key");
    Method alternatives = property.getMethod("getAlternatives");
    Method hasDefault = property.getMethod("hasDefaultValue");
    Method defaultValue = property.getMethod("defaultValue");
    TreeMap<String, String> types = new TreeMap<>();
    try (JarFile jar = new JarFile(args[0])) {
      for (Enumeration<JarEntry> entries = jar.entries(); entries.hasMoreElements(); ) {
        String name = entries.nextElement().getName();
        // Java classes, and Scala objects (DataSourceWriteOptions$), whose properties are their module's fields.
        if (!name.startsWith("org/apache/hudi/") || !name.endsWith(".class")
            || (name.contains("$") && !name.endsWith("$.class"))) {
          continue;
        }
        Class<?> declaring;
        Field[] fields;
        try {
          declaring = Class.forName(name.replace("/", ".").replace(".class", ""), false, loader);
          fields = declaring.getDeclaredFields();
        } catch (Throwable unloadable) {
          continue;  // (classes of the bundle's shaded libraries whose dependencies it leaves out)
        }
        boolean module = declaring.getName().endsWith("$");
        for (Field field : fields) {
          boolean isStatic = Modifier.isStatic(field.getModifiers());
          if ((!module && !isStatic) || !property.isAssignableFrom(field.getType())) {
            continue;
          }
          try {
            field.setAccessible(true);
            Object config = field.get(isStatic ? null : declaring.getField("MODULE$").get(null));
            Type type = field.getGenericType();
            String declared = type instanceof ParameterizedType
                ? typeOf(((ParameterizedType) type).getActualTypeArguments()[0].getTypeName()) : TEXT;
            Object fallback = (Boolean) hasDefault.invoke(config) ? defaultValue.invoke(config) : null;
            // Typed so, or with a default of that type; or a text whose default is one (textOf).
            String valueType = merge(declared, fallback == null ? TEXT : typeOf(fallback.getClass().getName()));
            if (valueType.equals(TEXT) && fallback instanceof String) {
              valueType = textOf((String) fallback);
            }
            types.merge((String) key.invoke(config), valueType, ListHudiConfigKeys::merge);
            for (Object other : (List<?>) alternatives.invoke(config)) {
              types.merge((String) other, valueType, ListHudiConfigKeys::merge);
            }
          } catch (Throwable unreadable) {
            // (a property whose class cannot be initialised here)
          }
        }
      }
    }
    StringBuilder out = new StringBuilder();
    out.append("\"\"\"Every config key Hudi 1.2.0's Spark bundle declares (its ConfigProperty fields and their alternative\n")
        .append("names), and the type Hudi parses its value as: \"boolean\" (Boolean.parseBoolean), \"integer\"\n")
        .append("(Integer.parseInt), \"long\" (Long.parseLong; also a text property whose default is a whole number,\n")
        .append("read with either), \"number\" (Double.parseDouble, Float.parseFloat), or \"\" (a text, taken as written).\n")
        .append("Generated by scripts/ListHudiConfigKeys.java from var/jars/spark/hudi-spark3.5-bundle_2.12-1.2.0.jar:\n")
        .append("do not edit, run it again with another bundle.\n")
        .append("\"\"\"\n\n")
        .append("HUDI_CONFIG_KEYS: dict[str, str] = {\n");
    for (Map.Entry<String, String> entry : types.entrySet()) {
      out.append("    \"").append(entry.getKey()).append("\": \"").append(entry.getValue()).append("\",\n");
    }
    out.append("}\n");
    System.out.print(out);
  }
}
