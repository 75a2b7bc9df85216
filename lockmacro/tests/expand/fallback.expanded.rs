async fn place(&self, id: u64) -> Result<String, AppError> {
    let __lock = match ::lockcore::__private::lock(
            ::lockcore::__private::manager(&(self.locks)),
            [::std::format!("o:{}", id)],
            ::lockcore::__private::Settings {
                ttl_ms: ::core::option::Option::None,
                wait_ms: ::core::option::Option::None,
                watchdog: ::core::option::Option::None,
                reentrant: true,
                on_lost: ::lockcore::__private::OnLost::Abort,
                key_template: "o:<id>",
            },
        )
        .await
    {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(
            __lock_error,
        ) if ::lockcore::__private::fallback(&__lock_error, "o:<id>") => {
            #[allow(unused_imports)]
            use ::lockcore::__private::FallbackFuture as _;
            return ::lockcore::__private::Fallback(Self::busy(self, id)).resolve().await;
        }
        ::core::result::Result::Err(__lock_error) => {
            return <Result<
                String,
                AppError,
            > as ::lockcore::__private::LockResult>::from_lock_error(__lock_error);
        }
    };
    let __lock_outcome = __lock
        .run(async move {
            #[allow(
                unreachable_code,
                clippy::diverging_sub_expression,
                clippy::empty_loop
            )]
            if false {
                let __lock_ret: Result<String, AppError> = loop {};
                return __lock_ret;
            }
            self.place_inner(id).await
        })
        .await;
    match __lock.finish(__lock_outcome).await {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            <Result<
                String,
                AppError,
            > as ::lockcore::__private::LockResult>::from_lock_error(__lock_error)
        }
    }
}
