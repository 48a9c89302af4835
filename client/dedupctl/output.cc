#include "output.h"

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace dedup::ctl {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

std::string Scalar(const Message& m, const FieldDescriptor* f) {
  const Reflection* r = m.GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_ENUM:
      return r->GetEnum(m, f)->name();
    case FieldDescriptor::CPPTYPE_BOOL:
      return r->GetBool(m, f) ? "true" : "false";
    case FieldDescriptor::CPPTYPE_UINT32:
      return absl::StrCat(r->GetUInt32(m, f));
    case FieldDescriptor::CPPTYPE_UINT64:
      return absl::StrCat(r->GetUInt64(m, f));
    case FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(r->GetInt32(m, f));
    case FieldDescriptor::CPPTYPE_INT64: {
      const int64_t v = r->GetInt64(m, f);
      if (absl::EndsWith(f->name(), "_ms")) {
        return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(v),
                                absl::UTCTimeZone());
      }
      return absl::StrCat(v);
    }
    case FieldDescriptor::CPPTYPE_STRING:
      return absl::StrCat("\"", absl::CHexEscape(r->GetString(m, f)), "\"");
    default:
      return "?";
  }
}

void Flatten(const Message& m, const std::string& prefix, std::vector<std::string>* out) {
  std::vector<const FieldDescriptor*> fields;
  m.GetReflection()->ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->is_repeated()) continue;
    const std::string name = prefix + f->name();
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      Flatten(m.GetReflection()->GetMessage(m, f), name + ".", out);
    } else {
      out->push_back(absl::StrCat(name, "=", Scalar(m, f)));
    }
  }
}

}  // namespace

std::string Render(const Message& message, bool json) {
  if (json) {
    std::string text;
    google::protobuf::util::JsonPrintOptions options;
    options.always_print_primitive_fields = true;
    options.preserve_proto_field_names = true;
    if (!google::protobuf::util::MessageToJsonString(message, &text, options).ok()) {
      return nlohmann::json{{"error", "cannot render the response as JSON"}}.dump();
    }
    return text;
  }
  std::vector<std::string> parts;
  Flatten(message, "", &parts);
  return absl::StrJoin(parts, " ");
}

}  // namespace dedup::ctl
