from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views import defaults

from connectors import metrics

admin.site.site_header = "sinkadmin"
admin.site.site_title = "sinkadmin admin"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/", include("connectors.api.urls")),
    path("metrics", metrics.metrics, name="metrics"),
    path("", include("connectors.urls")),
]


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A request Django refuses before any view (a missing or invalid Host header): the Connect API
    answers in its own error shape, as for every other error; the pages as Django does."""
    if request.path.startswith("/api/"):
        return JsonResponse({"error_code": 400, "message": "Bad Request"}, status=400)
    return defaults.bad_request(request, exception)


handler400 = bad_request
